"""The benchmark's parts run and report what they claim to (speed itself is for the bench to print)."""

from harness.bench import gateway_overhead, retrieval, table


def test_retrieval_compares_lancedb_with_a_python_scan_on_the_same_vectors():
    [row] = retrieval([1000], queries=3)
    assert row["lessons"] == 1000 and row["search"] == "flat"
    assert row["lancedb p50 ms"] > 0 and row["python scan p50 ms"] > 0
    assert row["speed-up"] == row["python scan p50 ms"] / row["lancedb p50 ms"]


def test_gateway_overhead_is_measured_against_litellm_direct(ray_session):
    result = gateway_overhead(5)
    assert result["gateway overhead p50 ms"] == result["gateway in-process p50 ms"] - result[
        "litellm direct p50 ms"]
    assert table([result]).splitlines()[0].startswith("| litellm direct p50 ms | gateway in-process")
