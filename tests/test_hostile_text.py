"""Text from outside that no table or terminal can hold (a lone surrogate, an escape sequence, a NUL)
is made safe where it enters; a row that still cannot be written fails the run loudly and costs no
other row (issue 33, item 5)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pyarrow.parquet as pq
import pytest

from harness.bench.fake_chat import FakeChatServer
from harness.errors import one_line
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest
from harness.tables.reading import read_table
from harness.tables.records import AttemptRow, Episode, LLMCall, TranscriptRow
from harness.tables.writer import TableWriter, UnwritableRows
from harness.text import safe_text
from tests.conftest import scripted_settings
from tests.processes import QUIET, run_cli

HOSTILE = "Paris\ud800 \x1b[31mRED\x00"
"""What the issue's server answered: valid JSON escapes for a lone surrogate, an escape, a NUL."""
SAFE = "Paris\ufffd \\x1b[31mRED\\x00"


def test_safe_text_replaces_lone_surrogates_and_shows_control_characters_escaped():
    assert safe_text(HOSTILE) == SAFE
    assert safe_text("\x9b2J\x7f") == "\\x9b2J\\x7f"  # C1 CSI and DEL too
    kept = "tab\tnew\nline\r\n, accents é, emoji \U0001f600, CJK 北京"
    assert safe_text(kept) is kept  # what needs nothing is not copied
    SAFE.encode("utf-8")


def test_an_error_message_reaches_the_terminal_without_its_escape_sequences():
    error = RuntimeError("bad \x1b]0;title\x07 \x00 \ud800")
    assert one_line(error) == "RuntimeError: bad \\x1b]0;title\\x07 \\x00 \ufffd"


@pytest.fixture
def hostile_server():
    with FakeChatServer(latency_s=0.0, answer=HOSTILE) as server:
        yield server


def test_the_gateway_hands_on_a_hostile_reply_made_safe(hostile_server):
    settings = scripted_settings("model=litellm", "model.name=openai/fake",
                                 f"model.api_base={hostile_server.api_base}")
    request = CallRequest(model=settings.model.name, purpose="act", run_id="r", task_id="t", attempt=1,
                          messages=[{"role": "user", "content": "Capital of France?"}])
    result = asyncio.run(Gateway([settings.model]).call(request))
    assert result.record.error is None
    assert result.text == SAFE


def _call(episode: str, call: str) -> dict:
    return LLMCall(call_id=call, run_id="r", episode_id=episode, task_id="t", attempt=1, purpose="act",
                   model="scripted/x", prompt_tokens=1, completion_tokens=1, total_tokens=2,
                   cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0, usage_source="counted",
                   cost_usd=0.0, latency_s=0.0, queued_s=0.0, retries=0, cached=False, error=None,
                   run_in_flight=1, started_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC)).model_dump()


def _transcript(episode: str, call: str, reply: str) -> dict:
    return TranscriptRow(call_id=call, run_id="r", episode_id=episode, task_id="t", attempt=1, purpose="act",
                         messages="[]", reply=reply, tool_calls=None).model_dump()


def test_a_row_no_table_can_hold_costs_only_its_episode_and_fails_loudly(tmp_path):
    writer = TableWriter(tmp_path, flush_interval_s=3600)
    writer.append(LLMCall.table, [_call("e1", "c1"), _call("e2", "c2")])
    # Text that bypassed every entry point (a bug of ours): the writer must not lose the calls for it.
    writer.append(TranscriptRow.table, [_transcript("e1", "c1", "fine"), _transcript("e2", "c2", HOSTILE)])
    with pytest.raises(UnwritableRows, match=r"1 row\(s\) of transcripts, e.g. of episode e2 "
                                             r"\(UnicodeEncodeError: .*surrogates not allowed"):
        writer.flush()
    assert sorted(read_table(tmp_path, LLMCall.table)["call_id"]) == ["c1", "c2"]
    assert read_table(tmp_path, TranscriptRow.table)["call_id"].to_list() == ["c1"]
    writer.close()  # nothing left behind to fail again
    assert sorted(read_table(tmp_path, LLMCall.table)["call_id"]) == ["c1", "c2"]


@pytest.mark.slow
def test_a_hostile_reply_leaves_every_row_and_a_finished_run(hostile_server, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("model=litellm", "model.name=openai/fake", f"model.api_base={hostile_server.api_base}",
                     "embedder=hashing", "stream.num_tasks=3", "cache.enabled=false", *QUIET,
                     f"hydra.run.dir={run_dir}", timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"
    calls = read_table(run_dir, LLMCall.table)
    episodes = read_table(run_dir, Episode.table)
    assert len(calls) == len(hostile_server.requests) >= 3
    assert len(episodes) == 3 and episodes["error"].is_null().all()
    assert len(read_table(run_dir, AttemptRow.table)) >= 3
    transcripts = read_table(run_dir, TranscriptRow.table)
    assert sorted(transcripts["call_id"]) == sorted(calls["call_id"])
    assert set(transcripts["reply"]) == {SAFE}
    assert "\x1b" not in result.stdout + result.stderr
    for table in (LLMCall.table, Episode.table, AttemptRow.table, TranscriptRow.table):
        for part in (run_dir / table).glob("*.parquet"):
            pq.read_table(part)  # every part readable


def test_the_writer_hub_keeps_writing_a_jobs_calls_after_an_unwritable_row_and_tells_the_job(tmp_path):
    from harness.driver.hub import WriterHub

    hub, job = WriterHub(), str(tmp_path)
    hub.open(job, flush_interval_s=0.0)
    hub.append_many({job: {LLMCall.table: [_call("e1", "c1")],
                           TranscriptRow.table: [_transcript("e1", "c1", HOSTILE)]}})
    hub.append_many({job: {LLMCall.table: [_call("e2", "c2")]}})  # a call still in flight: kept
    with pytest.raises(UnwritableRows):
        hub.poll(job)
    with pytest.raises(UnwritableRows):  # also when the job closes before it polled again
        hub.close(job)
    assert sorted(read_table(tmp_path, LLMCall.table)["call_id"]) == ["c1", "c2"]
