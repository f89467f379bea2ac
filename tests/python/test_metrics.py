# SPDX-License-Identifier: Apache-2.0
"""dpa.metrics: the ranks' all_reduce statistics for Prometheus, scraped over HTTP and checked
against the operations the ranks ran."""

import subprocess
import sys
import urllib.request

import pytest
import torch
import torch.distributed as dist

from harness import free_port, init_dpa, run_ranks

pytest.importorskip("prometheus_client")

OPERATIONS = 3
ELEMENTS = 100_000


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def samples(text):
    """{(name, labels text): value} of a text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def exporter_worker(rank, world, init_file, port):
    import prometheus_client

    import dpa.metrics

    init_dpa(rank, world, init_file)
    registry = prometheus_client.CollectorRegistry()
    assert dpa.metrics.register(registry) is dpa.metrics.register(registry)  # once per registry
    dpa.metrics.start_http_server(port + rank, registry=registry)
    before = samples(scrape(port + rank))
    for _ in range(OPERATIONS):
        dist.all_reduce(torch.ones(ELEMENTS))
    after = samples(scrape(port + rank))
    return before, after, dpa.last_stats()


def test_exporter_counts_the_operations_of_each_rank():
    world = 2
    port = free_port()
    results = run_ranks(exporter_worker, world, args=(port,))
    for rank, (before, after, last) in enumerate(results):
        label = (("rank", str(rank)),)
        assert before[("dpa_allreduce_seconds_count", label)] == 0
        assert after[("dpa_allreduce_seconds_count", label)] == OPERATIONS
        assert after[("dpa_allreduce_seconds_sum", label)] > 0
        blocks = after[("dpa_allreduce_blocks_total", label)]
        assert blocks == OPERATIONS * last["blocks"] and blocks > 0
        assert after[("dpa_allreduce_blocks_full_total", label)] == blocks  # no straggler, no fastest-K
        assert after[("dpa_allreduce_blocks_contributed_total", label)] == blocks
        assert after[("dpa_allreduce_blocks_missed_total", label)] == 0
        assert after[("dpa_allreduce_last_min_contributors", label)] == world
        for key, value in after.items():
            assert value >= before.get(key, 0), key  # counters never go back


def test_without_the_client_library_the_import_says_what_to_install():
    code = ("import sys; sys.modules['prometheus_client'] = None\n"
            "try:\n    import dpa.metrics\nexcept ImportError as e:\n    print(e)\n")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    assert "python3-prometheus-client" in output.stdout
