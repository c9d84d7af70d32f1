"""Self-Refine: draft, critique, refine within one attempt; only the final answer is scored."""

import json
from collections import Counter

import pytest

from harness.config import ConfigError
from tests.conftest import run_variant


@pytest.fixture
def france(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"id": "fr", "question": "What is the capital of France?", "answer": "Paris"}))
    return path


def refine_run(france, *rules: str, rounds: int = 2):
    return run_variant("variant=self_refine", "env=jsonl", f"env.path={france}", "stream.num_tasks=1",
                       "stream.tuning_size=0", "model.scripted.accuracy=0", f"variant.max_rounds={rounds}",
                       f"model.scripted.rules=[{','.join(rules)}]")


def purposes(run) -> Counter:
    return Counter(c["purpose"] for c in run.rows["llm_calls"])


def test_without_a_clean_critique_every_round_is_spent_and_billed_as_critique_and_act(france):
    run = refine_run(france, rounds=3)
    assert purposes(run) == Counter(act=4, critique=3)
    episode = run.rows["episodes"][0]
    assert episode["overhead_tokens"] == sum(c["total_tokens"] for c in run.rows["llm_calls"]
                                             if c["purpose"] == "critique")


def test_a_critique_that_says_correct_ends_the_rounds(france):
    run = refine_run(france, "{purpose: critique, reply: CORRECT}")
    assert purposes(run) == Counter(act=1, critique=1)


def test_a_refined_answer_replaces_the_draft_and_only_it_is_scored(france):
    run = refine_run(france, "{purpose: act, contains: Feedback on your answer, reply: Paris}",
                     "{purpose: critique, contains: 'Proposed answer: Paris', reply: CORRECT}")
    attempt = run.rows["attempts"][0]
    assert attempt["raw_response"] == "Paris" and attempt["success"]
    assert purposes(run) == Counter(act=2, critique=2)
    critiques = run.requests("critique")
    assert "Proposed answer: I am not sure." in critiques[0].messages[0]["content"]


def test_in_a_multi_step_env_it_acts_as_the_baseline():
    run = run_variant("variant=self_refine", "env=tools", "env.families=[bank.half]", "stream.num_tasks=2",
                      "model.scripted.accuracy=1")
    assert set(purposes(run)) == {"act"} and all(e["success"] for e in run.rows["episodes"])


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"variant: ValueError: variant\.max_rounds must be >= 1"):
        run_variant("variant=self_refine", "variant.max_rounds=0", "stream.num_tasks=1")
