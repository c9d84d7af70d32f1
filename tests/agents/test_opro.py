"""OPRO: tunes on held-out tasks only, keeps its best prompt, and is labelled by its protocol."""

import pytest

from envs.base import Task
from harness.agent_run.plan import build_plan
from harness.agent_run.tasks import check_disjoint
from harness.config import ConfigError
from tests.conftest import run_variant, scripted_settings


def test_opro_never_sees_a_task_of_its_stream_while_tuning():
    run = run_variant("variant=opro", "stream.num_tasks=8", "stream.tuning_size=10", "variant.steps=2")
    stream_questions = [e["question"] for e in run.rows["episodes"]]
    optimize = run.requests("optimize")
    assert len(optimize) == 3 * 10 + 2  # three prompts scored on 10 tasks, two meta-prompt calls
    for request in optimize:
        text = " ".join(m["content"] for m in request.messages)
        assert not any(q in text for q in stream_questions)


def test_opro_uses_the_best_scoring_prompt_on_its_stream_and_records_the_search():
    run = run_variant("variant=opro", "stream.num_tasks=5", "stream.tuning_size=10", "variant.steps=2")
    prompts = run.rows["prompts"]
    assert [p["step"] for p in prompts] == [0, 1, 2] and sum(p["selected"] for p in prompts) == 1
    best = max(prompts, key=lambda p: p["tuning_score"])
    chosen = next(p for p in prompts if p["selected"])
    assert chosen["tuning_score"] == best["tuning_score"]
    assert all(r.messages[0]["content"] == chosen["prompt"] for r in run.requests("act"))
    assert {e["protocol"] for e in run.rows["episodes"]} == {"held_out"}


def test_opro_cost_is_charged_to_the_first_episode():
    run = run_variant("variant=opro", "stream.num_tasks=4", "stream.tuning_size=10", "variant.steps=1")
    first, *rest = run.rows["episodes"]
    optimize_tokens = sum(c["total_tokens"] for c in run.rows["llm_calls"] if c["purpose"] == "optimize")
    assert first["overhead_tokens"] == optimize_tokens > 0
    assert all(e["overhead_tokens"] == 0 for e in rest)


def test_without_a_tuning_split_opro_tunes_on_its_stream_and_says_resubstitution():
    run = run_variant("variant=opro", "stream.num_tasks=5", "stream.tuning_size=0", "variant.steps=1")
    assert {e["protocol"] for e in run.rows["episodes"]} == {"resubstitution"}
    assert {p["protocol"] for p in run.rows["prompts"]} == {"resubstitution"}


def test_other_variants_are_online():
    run = run_variant("variant=baseline")
    assert {e["protocol"] for e in run.rows["episodes"]} == {"online"}


def test_a_tuning_split_that_overlaps_the_evaluation_pool_is_refused():
    a = Task(task_id="a", family="f", question="Q1", answer="x")
    b = Task(task_id="b", family="f", question="Q1", answer="x")
    with pytest.raises(ConfigError, match="overlaps the evaluation pool"):
        check_disjoint([a], [b])
    check_disjoint([a], [Task(task_id="c", family="f", question="Q2", answer="y")])


def test_the_tuning_split_is_the_same_for_every_seed_and_never_in_a_stream(tmp_path):
    settings = scripted_settings("seeds=[0,1,2]", "stream.num_tasks=100", "stream.tuning_size=40")
    specs = build_plan(settings, tmp_path)
    assert len(specs[0].tuning_tasks) == 40
    assert all(s.tuning_tasks == specs[0].tuning_tasks for s in specs)
    held = {t.task_id for t in specs[0].tuning_tasks}
    assert all(not held & {t.task_id for t in s.tasks} for s in specs)
