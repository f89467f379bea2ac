# SPDX-License-Identifier: Apache-2.0
"""What a waiting dpa all_reduce waits for (docs/pytorch.md, "Timeouts")."""

from . import _extension


def pending():
    """The dpa all_reduce of this process that waits longest for other ranks, as the switch
    reports it (it holds this rank's contribution, other ranks' are missing), or None when none
    waits: ``{"op_id": dpa operation number, "waited_s": seconds since its oldest waiting round
    was sent, "ranks": [ranks of the group it waits for]}``. Any thread may ask, e.g. a watchdog
    while the main thread blocks in ``all_reduce``."""
    return _extension.load().pending()
