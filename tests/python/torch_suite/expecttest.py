# SPDX-License-Identifier: Apache-2.0
"""Stand-in for the `expecttest` package, which torch's test utilities import and Debian does not
package. torch.testing._internal.common_utils needs its TestCase base and its ACCEPT switch; the
distributed tests never compare against recorded expectations."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 - expecttest's name
        self.assertEqual(actual, expect)
