"""GEPA: reflective prompt evolution on a Pareto frontier of tuning tasks, then a merge."""

import json
import re
import tempfile
from pathlib import Path

import pytest

from agents.gepa import frontier, instruction_in
from harness.agent_run.plan import build_plan
from harness.config import ConfigError
from tests import tiers
from tests.agents.test_cheatsheet import rules
from tests.agents.test_reasoning_bank import ENVS, NO_SCIENCEWORLD
from tests.conftest import replayed_run, run_variant, scripted_settings

# Four tuning tasks: the first two are the Pareto tasks, the other two the feedback minibatch.
SMALL = ["variant=gepa", "stream.num_tasks=3", "stream.tuning_size=4", "variant.pareto_size=2",
         "variant.minibatch=2", "variant.max_rollouts=20", "model.scripted.accuracy=0"]
REFLECTION = "write an improved instruction"
MERGE = "Two instructions for an assistant"


def tuning_answers() -> list[str]:
    spec = build_plan(scripted_settings(*SMALL), Path(tempfile.mkdtemp(prefix="harness-test-")))[0]
    return [t.answer for t in spec.tuning_tasks]


def two_specialists() -> str:
    """Scripted reflections: on the starting prompt, a prompt that knows Pareto task 1 and feedback
    task 1; on that one, a prompt that knows Pareto task 2 and both feedback tasks (more of the
    minibatch, so it is kept) but not Pareto task 1; a merge knows both Pareto tasks. The scripted
    model answers right exactly what its prompt names (accuracy 0)."""
    first, second, feedback_1, feedback_2 = tuning_answers()
    return rules(("optimize", f"<instruction>MERGED {first}; {second}</instruction>", MERGE),
                 ("optimize", f"<instruction>HINT-2 {second}; {feedback_1}; {feedback_2}</instruction>",
                  "<instruction>\nHINT-1"),
                 ("optimize", f"<instruction>HINT-1 {first}; {feedback_1}</instruction>", REFLECTION))


def test_the_frontier_keeps_an_instance_wise_winner_that_the_best_mean_would_drop():
    scores = [[1, 1, 1, 0],   # best mean
              [0, 0, 0, 1],   # worst mean, but the only one to solve the last task
              [1, 1, 0, 0],   # best only where the first is too: dominated
              [0, 0, 0, 1]]   # the same wins as the second: the earlier stays
    assert frontier(scores) == {0: 3, 1: 1}
    assert frontier([[0, 0], [0, 0]]) == {0: 2} and frontier([]) == {}


def test_a_proposal_is_read_from_its_tags_or_else_whole():
    assert instruction_in('Sure. <instruction>\n"Be exact."\n</instruction> Done.') == "Be exact."
    assert instruction_in("<instruction>cut off by the token lim") == "cut off by the token lim"
    assert instruction_in("  Just answer.  ") == "Just answer."


def test_gepa_keeps_two_specialists_on_its_frontier_and_each_came_from_reflecting_on_its_parent():
    run = run_variant(*SMALL, "variant.merge=false", two_specialists())
    kept = {p["prompt"].split()[0]: p for p in run.rows["prompts"] if p["kept"]}
    start, hint_1, hint_2 = kept["You"], kept["HINT-1"], kept["HINT-2"]
    assert (hint_1["origin"], hint_1["parent_step"]) == ("mutation", start["step"])
    assert (hint_2["origin"], hint_2["parent_step"]) == ("mutation", hint_1["step"])
    # Each solves one Pareto task the other does not: both stay, the dominated start does not.
    assert hint_1["tuning_score"] == hint_2["tuning_score"] == 0.5 and start["tuning_score"] == 0
    assert hint_1["frontier"] and hint_2["frontier"] and not start["frontier"]
    assert hint_1["selected"] and not hint_2["selected"]  # equal means: the earlier one
    assert {e["protocol"] for e in run.rows["episodes"]} == {"held_out"}
    assert all(r.messages[0]["content"] == hint_1["prompt"] for r in run.requests("act"))


def test_the_merge_of_two_frontier_candidates_is_scored_like_them_and_wins_when_it_solves_both():
    run = run_variant(*SMALL, two_specialists())
    prompts = run.rows["prompts"]
    [merged] = [p for p in prompts if p["origin"] == "merge"]
    hint_1 = next(p for p in prompts if p["prompt"].startswith("HINT-1"))
    assert merged["kept"] and merged["tuning_score"] == 1.0 and merged["tuning_tasks"] == 2
    assert merged["selected"] and merged["frontier"] and merged["parent_step"] == hint_1["step"]
    assert not hint_1["frontier"]  # the merge now wins everything it won
    merge_requests = [r for r in run.requests("optimize") if MERGE in r.messages[0]["content"]]
    assert len(merge_requests) == 1 and "HINT-1" in merge_requests[0].messages[0]["content"]
    assert all(r.messages[0]["content"] == merged["prompt"] for r in run.requests("act"))


def test_a_proposal_that_solves_no_more_of_the_minibatch_is_recorded_but_never_scored_on_the_pareto_tasks():
    run = run_variant(*SMALL, rules(("optimize", "<instruction>Think harder.</instruction>", REFLECTION)))
    [proposal] = [p for p in run.rows["prompts"] if p["prompt"] == "Think harder."]
    assert proposal["kept"] is False and proposal["tuning_tasks"] == 2 and not proposal["selected"]
    answered = [r for r in run.requests("optimize")
                if r.messages[0]["content"] == "Think harder." and "capital" in r.messages[1]["content"]]
    assert len(answered) == 2  # the minibatch only, once: a known proposal is not tried again


def test_gepa_answers_no_more_tuning_questions_than_its_budget_and_never_a_stream_question():
    run = run_variant("variant=gepa", "stream.num_tasks=5", "stream.tuning_size=10", "variant.pareto_size=4",
                      "variant.max_rollouts=30", "model.scripted.accuracy=0.3")
    stream_questions = [e["question"] for e in run.rows["episodes"]]
    optimize = run.requests("optimize")
    answers = [r for r in optimize if r.messages[0]["role"] == "system"]
    assert 4 < len(answers) <= 30 and len(optimize) > len(answers)  # reflections beside the answers
    for request in optimize:
        assert not any(q in " ".join(m["content"] for m in request.messages) for q in stream_questions)
    first, *rest = run.rows["episodes"]
    optimize_tokens = sum(c["total_tokens"] for c in run.rows["llm_calls"] if c["purpose"] == "optimize")
    assert first["overhead_tokens"] == optimize_tokens > 0 and all(e["overhead_tokens"] == 0 for e in rest)


def test_at_their_defaults_gepa_spends_no_more_tuning_answers_than_opro():
    def answers(variant: str) -> int:
        run = run_variant(f"variant={variant}", "stream.num_tasks=2", "stream.tuning_size=20",
                          "model.scripted.accuracy=0.3")
        return sum(r.messages[0]["role"] == "system" for r in run.requests("optimize"))

    opro, gepa = answers("opro"), answers("gepa")
    # GEPA stops when a worst-case round (minibatch twice, 10 Pareto tasks) and the merge no longer fit.
    assert opro == 80 and 80 - (2 * 3 + 10 + 10) <= gepa <= 80


def test_without_a_tuning_split_gepa_tunes_on_its_stream_and_says_resubstitution():
    run = run_variant("variant=gepa", "stream.num_tasks=5", "stream.tuning_size=0", "variant.max_rollouts=12")
    assert {e["protocol"] for e in run.rows["episodes"]} == {"resubstitution"}
    assert {p["protocol"] for p in run.rows["prompts"]} == {"resubstitution"}


def test_a_resumed_gepa_run_ends_with_the_state_of_an_uninterrupted_one():
    overrides = ["variant=gepa", "stream.tuning_size=6", "variant.pareto_size=3", "variant.max_rollouts=24"]
    whole_dir, episodes = replayed_run(overrides, finished=0)
    resumed_dir, replayed = replayed_run(overrides, finished=5)
    whole = json.loads((whole_dir / "state.json").read_text())
    assert json.loads((resumed_dir / "state.json").read_text()) == whole
    assert whole["protocol"] == "held_out"
    assert len(replayed) == len(episodes) - 5
    assert [e["success"] for e in replayed] == [e["success"] for e in episodes[5:]]


@pytest.mark.parametrize("env", tiers.env_params(sorted(ENVS)))
def test_it_runs_on_every_env_with_the_scripted_model(env):
    if env == "scienceworld" and NO_SCIENCEWORLD:
        pytest.skip(NO_SCIENCEWORLD)
    run = run_variant("variant=gepa", "stream.num_tasks=2", "variant.pareto_size=2", "variant.minibatch=1",
                      "variant.max_rollouts=8", *ENVS[env])
    episodes = run.rows["episodes"]
    assert len(episodes) == 2 and all(e["error"] is None for e in episodes)
    assert sum(p["selected"] for p in run.rows["prompts"]) == 1
    assert episodes[0]["overhead_tokens"] > 0


@pytest.mark.parametrize(("override", "says"), [
    ("variant.minibatch=0", "variant.max_rollouts, variant.pareto_size and variant.minibatch must be >= 1"),
    ("variant.reflect_prompt='{examples} only'", "variant.reflect_prompt must contain {instruction}"),
    ("variant.merge_prompt='{first} only'", "variant.merge_prompt must contain {second}")])
def test_a_bad_option_is_refused_in_one_line(override, says):
    with pytest.raises(ConfigError, match=r"^invalid config: variant: ValueError: .*" + re.escape(says)):
        run_variant("variant=gepa", "stream.num_tasks=1", override)
