"""The sweep bench's HTTP model answers many requests at once after its latency, and the bench reads
a sweep's tables and its commands as it says (the sweeps themselves are for the bench to run)."""

import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.bench.commands import Measured, measure
from harness.bench.common import table
from harness.bench.fake_chat import FakeChatServer, ServerProcess
from harness.bench.sweep import _row, ideal_s, read_results
from harness.tables.records import Episode, LLMCall


async def _post_many(api_base: str, n: int) -> tuple[float, list[tuple[int, dict]]]:
    body = {"model": "fake", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        async def one() -> tuple[int, dict]:
            async with client.post(f"{api_base}/chat/completions", json=body) as reply:
                return reply.status, await reply.json()

        started = time.perf_counter()
        replies = await asyncio.gather(*[one() for _ in range(n)])
        return time.perf_counter() - started, replies


def test_the_http_model_answers_two_hundred_requests_at_once_after_its_latency():
    with FakeChatServer(latency_s=0.3) as server:
        wall, replies = asyncio.run(_post_many(server.api_base, 200))
    assert wall >= 0.3 and wall < 3.0  # one latency, not 200 of them (a loaded machine adds some)
    assert server.peak_in_flight >= 100 and len(server.arrivals) == 200
    status, answer = replies[0]
    assert status == 200 and answer["choices"][0]["message"]["content"] == "Paris"
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] == len("What is the capital of France?") // 4
    assert server.requests[0]["path"] == "/v1/chat/completions"


def test_the_http_model_lists_its_model_and_can_refuse():
    async def get_and_post(api_base: str) -> tuple[dict, int]:
        async with aiohttp.ClientSession() as client:
            async with client.get(f"{api_base}/models") as reply:
                models = await reply.json()
            body = {"model": "fake", "messages": []}
            async with client.post(f"{api_base}/chat/completions", json=body) as reply:
                return models, reply.status

    with FakeChatServer(latency_s=0.0, status=401) as server:
        models, status = asyncio.run(get_and_post(server.api_base))
    assert models["data"][0]["id"] == "fake" and status == 401


@pytest.mark.slow
def test_a_command_is_measured_from_its_start_to_the_first_request_the_server_saw(tmp_path):
    client = ("import time, urllib.request as u; time.sleep(0.5); "
              "u.urlopen(u.Request('{base}/chat/completions', data=b'{{\"messages\": []}}', "
              "headers={{'Content-Type': 'application/json'}})).read(); "
              "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
    with ServerProcess(latency_s=0.1) as server:
        measured = measure([sys.executable, "-c", client.format(base=server.api_base)], server,
                           tmp_path / "client.log")
    assert measured.returncode == 0 and measured.requests == 1 and measured.stopped == ""
    assert 0.5 <= measured.first_call_s < measured.wall_s
    assert measured.cpu_s >= 0.25 and measured.peak_rss > 5 * 2**20  # its busy loop, one python process


def _write(path: Path, model: type, rows: list[dict]) -> None:
    """Rows with the table's real columns; those a row leaves out are null."""
    schema = pa.schema([f.with_nullable(True) for f in model.arrow_schema()])
    path.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "part-0.parquet")


def test_a_sweeps_tables_give_its_calls_longest_chain_window_and_ideal(tmp_path):
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for job, (run, calls) in enumerate([("a", 3), ("b", 5)]):
        rows = [{"call_id": f"{run}{i}", "run_id": run, "model": "openai/fake", "cached": False,
                 "purpose": "act"} for i in range(calls)]
        rows.append({"call_id": f"{run}-embed", "run_id": run, "model": "hashing/384", "cached": False})
        _write(tmp_path / str(job) / "llm_calls", LLMCall, rows)
        _write(tmp_path / str(job) / "episodes", Episode,
               [{"episode_id": f"{run}/{i}", "run_id": run,
                 "started_at": start + dt.timedelta(seconds=i + job),
                 "finished_at": start + dt.timedelta(seconds=i + job + 1)} for i in range(calls)])
    (tmp_path / "multirun.yaml").write_text("")
    stages_of_jobs = [{"composed": 2.0, "ray": 9.0, "checked": 14.0}, {"composed": 2.5, "ray": 9.0}]
    for job, stages in enumerate(stages_of_jobs):
        (tmp_path / str(job) / "manifest.json").write_text(json.dumps({"startup_s": stages}))
    results = read_results(tmp_path)
    assert (results.jobs, results.runs, results.calls, results.chain, results.episodes) == (2, 2, 8, 5, 8)
    assert results.startup_s == {"composed": 2.0, "ray": 9.0, "checked": 14.0}  # each stage's earliest
    assert results.window_s == 6.0  # job 1's last episode ends 6 s after job 0's first starts
    assert ideal_s(results, 0.2, max_concurrency=256) == pytest.approx(1.0)  # the chain bounds
    assert ideal_s(results, 0.2, max_concurrency=1) == pytest.approx(1.6)  # the cap bounds
    measured = Measured(wall_s=2.0, returncode=0, first_call_s=0.5, requests=8, peak_in_flight=2,
                        peak_rss=2**30, used_rise=2**29, cpu_s=0.8)
    row = _row("sweep", 2, measured, results, 0.2, 256)
    assert row["wall/ideal %"] == pytest.approx(200) and row["window/ideal %"] == pytest.approx(600)
    assert row["CPU ms/call"] == pytest.approx(100) and row["status"] == "ok"
    assert table([row]).splitlines()[0].startswith("| what | n | agent runs | model calls |")
