"""The benchmark's parts run and report what they claim to (speed itself is for the bench to print)."""


import numpy as np
import pytest

from harness.bench.common import table
from harness.bench.gateway_overhead import gateway_overhead
from harness.bench.grown_memory import grown_memory
from harness.bench.local_model import local_model_tokens
from harness.bench.retrieval import numpy_top_k, retrieval
from harness.bench.throughput import throughput


def test_numpy_top_k_is_the_exact_top_k_by_cosine_best_first():
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((200, 16)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = rng.standard_normal(16).astype(np.float32)
    assert numpy_top_k(matrix, query, 5).tolist() == np.argsort(-(matrix @ query))[:5].tolist()


def test_retrieval_compares_lancedb_with_numpy_brute_force_doing_the_same_search():
    [row] = retrieval([1000], queries=5)
    assert row["lessons"] == 1000 and row["search"] == "flat"
    assert row["lancedb p50 ms"] > 0 and row["numpy top-k p50 ms"] > 0
    assert row["lancedb / numpy"] == row["lancedb p50 ms"] / row["numpy top-k p50 ms"]
    assert row["top-1 agrees with numpy"] >= 0.8  # a flat search is exact: the same lessons come back


def test_a_memory_grown_write_by_write_is_compared_with_one_written_in_one_go_and_with_before():
    [row] = grown_memory([150], queries=5, uncompacted_up_to=150, compact_every=10)
    assert row["lessons"] == 150
    assert row["grown / one go"] == row["grown p50 ms"] / row["one go p50 ms"]
    assert row["before / one go"] == row["before p50 ms"] / row["one go p50 ms"]
    assert row["versions kept"] <= 10  # compacted every 10 writes, old versions deleted
    assert row["grown bytes/lesson"] <= row["grown peak bytes/lesson"] < 4096
    assert row["before bytes/lesson"] > 4 * row["grown bytes/lesson"]  # a version and fragment a write
    assert table([row]).splitlines()[0].startswith("| lessons | grown p50 ms |")


@pytest.mark.slow
def test_throughput_reports_cpu_per_model_call_and_the_extra_setting(ray_session):
    [row] = throughput([2], tasks_per_run=2, latency=0.1, extra=("stream.num_tasks=3",))
    assert row["setting"] == "stream.num_tasks=3"
    assert row["episodes"] == row["model calls"] == 6  # the extra override came last, so it won
    assert row["harness CPU ms per call"] > row["CPU ms per call while running"] > 0  # no start-up
    assert row["peak RSS GiB"] > 0
    assert table([row]).splitlines()[0].startswith("| setting | agent runs |")


@pytest.mark.slow
def test_gateway_overhead_is_measured_against_litellm_direct_and_with_shared_limits(ray_session):
    result = gateway_overhead(5)
    assert result["gateway overhead p50 ms"] == result["gateway in-process p50 ms"] - result[
        "litellm direct p50 ms"]
    assert result["shared limits cost p50 ms"] == result["gateway, shared limits p50 ms"] - result[
        "gateway in-process p50 ms"]
    assert table([result]).splitlines()[0].startswith("| litellm direct p50 ms | gateway in-process")


@pytest.mark.e2e
def test_the_local_model_is_timed_through_the_gateway_and_directly_with_the_same_answers():
    result = local_model_tokens(1, rounds=2)  # the prompt both ways: the harness first, then directly first
    assert result["prompts"] == 1 and result["rounds"] == 2
    assert result["same completion tokens"] == "2/2"  # temperature 0 on both sides: like for like
    assert result["harness tok/s"] > 0 and result["direct tok/s"] > 0
    assert result["harness / direct"] == result["harness tok/s"] / result["direct tok/s"]
