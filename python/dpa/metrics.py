# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics of this process's dpa all_reduce operations (docs/metrics.md).

    import dpa.metrics
    dpa.metrics.start_http_server(9470 + int(os.environ.get("LOCAL_RANK", 0)))

serves, at http://127.0.0.1:PORT/metrics, the statistics of every dpa all_reduce this process
completed (the sums of what ``dpa.last_stats()`` reports per operation): blocks completed by all
ranks or by fastest-K, blocks this rank missed, retransmissions, timeouts, SYN probes, and the
operations' count and wall time. Nothing runs per operation in Python: the backend adds each
operation's statistics to process-wide sums (``dpa._C.total_stats()``), which are read when
Prometheus scrapes.

Needs the Prometheus client library (Debian: python3-prometheus-client; pip: prometheus-client).
"""

import os
import weakref

try:
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        "dpa.metrics needs the Prometheus client library: apt install python3-prometheus-client "
        "(Debian/Ubuntu) or pip install prometheus-client"
    ) from error

from . import _extension

__all__ = ["register", "start_http_server"]

# (key of dpa._C.total_stats(), metric name without _total, help): counters over every operation.
_COUNTERS = (
    ("blocks", "dpa_allreduce_blocks",
     "Blocks (packets' worth of data) of the completed all_reduce operations"),
    ("blocks_full", "dpa_allreduce_blocks_full", "Blocks whose result summed all N ranks"),
    ("blocks_partial", "dpa_allreduce_blocks_partial",
     "Blocks whose result summed fewer than N ranks (fastest-K)"),
    ("blocks_missed", "dpa_allreduce_blocks_missed",
     "Blocks whose result this rank never received (its output holds its own input there)"),
    ("blocks_non_finite", "dpa_allreduce_blocks_non_finite",
     "Float blocks that held NaN or Inf on some rank"),
    ("blocks_out_of_range", "dpa_allreduce_blocks_out_of_range",
     "Float blocks of this rank reaching 2^126 in magnitude (sent as non-finite)"),
    ("contributed", "dpa_allreduce_blocks_contributed", "Blocks whose result includes this rank's values"),
    ("retransmissions", "dpa_allreduce_retransmissions", "Packets sent again after a timeout"),
    ("timeouts", "dpa_allreduce_timeouts", "Retransmission timer expiries"),
    ("syn_probes", "dpa_allreduce_syn_probes", "SYN probes sent to fetch a missed result"),
)

# registry -> dpa's collector in it: registering twice would duplicate the series.
_registered = weakref.WeakKeyDictionary()


def _default_rank():
    """This process's rank: the default process group's, else torchrun's RANK, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    rank = os.environ.get("RANK")
    return int(rank) if rank is not None and rank.isdigit() else None


class _Collector:
    """Reads the backend's sums at every scrape."""

    def __init__(self, rank):
        self._label_names = [] if rank is None else ["rank"]
        self._label_values = [] if rank is None else [str(rank)]

    def collect(self):
        extension = _extension.load()
        totals = extension.total_stats()
        seconds = SummaryMetricFamily(
            "dpa_allreduce_seconds",
            "Completed dpa all_reduce operations and their wall time (submission to completion)",
            labels=self._label_names)
        seconds.add_metric(self._label_values, count_value=totals["operations"], sum_value=totals["seconds"])
        yield seconds
        for key, name, text in _COUNTERS:
            family = CounterMetricFamily(name, text, labels=self._label_names)
            family.add_metric(self._label_values, totals[key])
            yield family
        last = extension.last_stats()
        family = GaugeMetricFamily("dpa_allreduce_last_min_contributors",
                                   "Smallest contributor count of any block of the last completed operation",
                                   labels=self._label_names)
        if last is not None:
            family.add_metric(self._label_values, last["min_contributors"])
        yield family


def register(registry=None, rank=None):
    """Adds dpa's metrics to ``registry`` (default: prometheus_client's global REGISTRY), with a
    ``rank`` label (default: the process group's rank, else $RANK; no label when neither is
    known). Registering again with the same registry returns the first collector."""
    _extension.load()  # where it cannot be loaded, this call says why, not every scrape
    registry = prometheus_client.REGISTRY if registry is None else registry
    if registry not in _registered:
        collector = _Collector(_default_rank() if rank is None else rank)
        registry.register(collector)
        _registered[registry] = collector
    return _registered[registry]


def start_http_server(port, addr="127.0.0.1", registry=None, rank=None):
    """Registers dpa's metrics (``register``) and serves ``registry`` at http://addr:port/metrics
    on a daemon thread. The default address keeps them on this host; pass addr="0.0.0.0" for a
    Prometheus server elsewhere. With several ranks on a host, give each its own port (e.g.
    base + LOCAL_RANK)."""
    registry = prometheus_client.REGISTRY if registry is None else registry
    register(registry, rank)
    prometheus_client.start_http_server(port, addr=addr, registry=registry)
