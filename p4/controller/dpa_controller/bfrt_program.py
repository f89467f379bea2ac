# SPDX-License-Identifier: Apache-2.0
"""Where the program's objects live in bfrt_python: `bfrt.<program>.pipe.<control path>`.
The controller modules reach the tables through this one object, and the tests hand it a
recording fake.
"""

PROGRAM = "dpa"


class BfrtProgram:
    def __init__(self, bfrt, program=PROGRAM):
        self.bfrt = bfrt
        self.pipe = getattr(bfrt, program).pipe

    def ingress(self, *path):
        node = self.pipe.Ingress
        for name in path:
            node = getattr(node, name)
        return node

    def egress(self, *path):
        node = self.pipe.Egress
        for name in path:
            node = getattr(node, name)
        return node

    def parser(self, name):
        return getattr(self.pipe.IngressParser, name)

    def batch(self):
        """Groups many writes (register clears) into one driver batch."""
        return _Batch(self.bfrt)


class _Batch:
    def __init__(self, bfrt):
        self.bfrt = bfrt

    def __enter__(self):
        self.bfrt.batch_begin()
        return self

    def __exit__(self, *exc):
        self.bfrt.batch_end()
        return False
