"""Transcripts: every call's input and raw reply, joinable on call_id; secrets never land in a row."""

import json

import pytest

from harness.redact import REDACTED, Redactor
from tests.conftest import run_variant


def test_every_call_has_its_transcript_with_the_messages_sent_and_the_raw_reply():
    run = run_variant("variant=memory", "stream.num_tasks=4")
    calls = run.rows["llm_calls"]
    transcripts = {t["call_id"]: t for t in run.rows["transcripts"]}
    assert sorted(transcripts) == sorted(c["call_id"] for c in calls)
    sent = {r.messages[-1]["content"] if r.messages else None: r for r in run.gateway.requests}
    for call in calls:
        transcript = transcripts[call["call_id"]]
        assert {k: transcript[k] for k in ("run_id", "episode_id", "task_id", "attempt", "purpose")} == \
            {k: call[k] for k in ("run_id", "episode_id", "task_id", "attempt", "purpose")}
        said = json.loads(transcript["messages"])
        if call["purpose"] == "embed":
            assert transcript["reply"] is None and all(isinstance(text, str) for text in said)
        else:
            assert said == sent[said[-1]["content"]].messages and transcript["reply"]


def test_an_attempt_keeps_the_raw_reply_beside_the_extracted_answer():
    run = run_variant("stream.num_tasks=5", "model.scripted.accuracy=1")
    replies = {t["episode_id"]: t["reply"] for t in run.rows["transcripts"] if t["purpose"] == "act"}
    for attempt in run.rows["attempts"]:
        assert attempt["raw_response"] == replies[attempt["episode_id"]]
        assert attempt["response"] is not None


def test_transcripts_can_be_turned_off():
    run = run_variant("stream.num_tasks=3", "output.transcripts=false")
    assert run.rows.get("transcripts", []) == [] and len(run.rows["llm_calls"]) == 3


def test_no_row_holds_a_secret_value(monkeypatch: pytest.MonkeyPatch, tmp_path):
    key, passphrase = "sk-test-9f8e7d6c5b4a", 'correct "horse" battery'
    monkeypatch.setenv("HARNESS_TEST_API_KEY", key)
    monkeypatch.setenv("MY_PASSPHRASE", passphrase)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "question": f"Repeat {key} and {passphrase} ({i})",
                                         "answer": f"{key} {i}"}) + "\n" for i in range(3)))
    run = run_variant("env=jsonl", f"env.path={tasks}", "stream.num_tasks=3", "stream.tuning_size=0",
                      "variant=memory", "output.secret_env=[MY_PASSPHRASE]")
    written = json.dumps(run.rows, default=str)
    assert key not in written and passphrase not in written and json.dumps(passphrase)[1:-1] not in written
    assert all(REDACTED in t["messages"] for t in run.rows["transcripts"] if t["purpose"] == "act")


def test_only_values_of_credential_variables_and_named_ones_are_secret():
    redact = Redactor.from_environment(["MY_WORDS"], environ={
        "OPENAI_API_KEY": "sk-abcdef", "GITHUB_TOKEN": "ghp_123456", "MY_WORDS": "open sesame",
        "HOME": "/root/home", "DEBUG": "1", "SHORT_SECRET": "abc"})
    assert redact("sk-abcdef ghp_123456 open sesame /root/home abc") == \
        f"{REDACTED} {REDACTED} {REDACTED} /root/home abc"
