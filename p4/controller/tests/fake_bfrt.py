# SPDX-License-Identifier: Apache-2.0
"""A recording stand-in for bfshell's `bfrt` object: every call but a read (`get`, `get_default`) is logged as
(path, method, kwargs), `bfrt.batch_begin()` as ("", "batch_begin", {}); `get` calls answer from
scripted values."""


READS = ("get", "get_default")


class Entry:
    def __init__(self, data):
        self.data = data


class Recorder:
    def __init__(self, dev_ports, activity=None):
        self.calls = []
        self.dev_ports = dev_ports          # (connector, lane) -> dev port
        self.activity = activity or {}      # session index -> accepted packets

    def answer(self, path, method, kwargs):
        if path == "port.port_hdl_info" and method == "get":
            return Entry({b"$DEV_PORT": self.dev_ports[(kwargs["CONN_ID"], kwargs["CHNL_ID"])]})
        if path.endswith("admission.activity") and method == "get":
            return Entry({b"$COUNTER_SPEC_PKTS": self.activity.get(kwargs["COUNTER_INDEX"], 0)})
        if method in READS:
            return Entry({b"$COUNTER_SPEC_PKTS": 0})
        return None


class Node:
    def __init__(self, recorder, path):
        self._recorder = recorder
        self._path = path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Node(self._recorder, self._path + (name,))

    def __call__(self, **kwargs):
        path, method = ".".join(self._path[:-1]), self._path[-1]
        if method not in READS:
            self._recorder.calls.append((path, method, kwargs))
        return self._recorder.answer(path, method, kwargs)


def make(dev_ports, activity=None):
    recorder = Recorder(dev_ports, activity)
    return Node(recorder, ()), recorder
