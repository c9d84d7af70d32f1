"""stream.repeats: the same agent run repeated on the same tasks, and the noise floor it measures."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import polars as pl

from harness.agent_run.assembly import build_agent
from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.agent_run.runner import run_agent
from harness.config import CacheSettings
from harness.models.gateway import Gateway
from harness.models.model_client import AgentModelClient
from harness.report.compare import noise_floor, paired_comparisons
from tests.conftest import ListSink, scripted_settings


def test_repeats_run_the_same_tasks_in_the_same_order_as_runs_of_their_own():
    single = build_plan(scripted_settings("stream.num_tasks=5"), Path("/tmp/x"))
    repeated = build_plan(scripted_settings("stream.num_tasks=5", "stream.repeats=3"), Path("/tmp/x"))
    assert [s.repeat for s in repeated] == [0, 1, 2]
    assert len({s.run_id for s in repeated}) == 3
    assert repeated[0].run_id == single[0].run_id  # a first repeat resumes as the run without repeats
    orders = {tuple(t.task_id for t in s.tasks) for s in repeated}
    assert orders == {tuple(t.task_id for t in single[0].tasks)}


def test_a_repeat_draws_its_own_sampling_seeds():
    specs = build_plan(scripted_settings("stream.num_tasks=2", "stream.repeats=2"), Path("/tmp/x"))
    gateway = Gateway([scripted_settings().model])
    seeds = set()
    for spec in specs:
        llm = AgentModelClient(gateway, model=spec.model, run_id=spec.run_id)
        agent = build_agent(spec, llm, None, build_environment(spec.env_cfg))
        seeds.add(agent.sampling(0.7)["seed"])
    assert len(seeds) == 2


def test_a_repeat_is_never_answered_from_another_repeats_cache():
    directory = Path(tempfile.mkdtemp(prefix="harness-cache-"))
    settings = scripted_settings("stream.num_tasks=3", "stream.repeats=2", "cache.enabled=true",
                                 f"cache.dir={directory}")
    specs = build_plan(settings, Path(tempfile.mkdtemp()))
    answer_key = {t.question: t.answer for t in specs[0].tasks}

    def cached_calls(spec) -> list[bool]:
        sink = ListSink()
        gateway = Gateway([settings.model, settings.embedder], answer_key=answer_key,
                          cache=CacheSettings.model_validate(settings.cache.model_dump()))
        asyncio.run(run_agent(spec, build_environment(spec.env_cfg), gateway, sink))
        return [c["cached"] for c in sink.rows["llm_calls"]]

    assert not any(cached_calls(specs[0]))  # fills the cache
    assert not any(cached_calls(specs[1]))  # the other repeat: nothing reused
    assert all(cached_calls(specs[0]))  # the same repeat again: all from the cache


def episodes(variant: str, verdicts: dict[int, list[bool]]) -> pl.DataFrame:
    """Episodes of one variant: for each repeat, its verdicts on tasks t0, t1, ... at seed 0."""
    return pl.DataFrame([
        {"variant": variant, "run_id": f"{variant}-r{repeat}", "seed": 0, "order_seed": 0, "repeat": repeat,
         "stream_position": position, "task_id": f"t{position}", "success": success, "probe": False,
         "attempted": True}
        for repeat, successes in verdicts.items() for position, success in enumerate(successes)])


def test_the_flip_rate_is_the_share_of_tasks_whose_verdict_differs_between_repeats():
    frame = episodes("baseline", {0: [True, True, False, False], 1: [True, False, False, True]})
    row = noise_floor(frame, ["variant"]).row(0, named=True)
    assert (row["variant"], row["repeats"], row["tasks"], row["flip_rate"]) == ("baseline", 2, 4, 0.5)
    assert row["ci_low"] <= 0.5 <= row["ci_high"]
    assert noise_floor(episodes("baseline", {0: [True, False]}), ["variant"]).is_empty()  # no repeats


def test_repeats_pair_repeat_by_repeat_and_each_difference_stands_beside_its_noise_floor():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, False, False], 1: [True, False, False, False]}),
        episodes("memory", {0: [True, True, True, False], 1: [True, True, False, False]})])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert row["pairs"] == 8  # 4 tasks x 2 repeats, each repeat with its own counterpart
    assert row["noise_floor"] == 0.25  # memory flipped on 1 of 4 tasks; baseline on none


def test_repeats_are_runs_of_their_own_and_the_plan_says_what_two_cannot_show():
    frame = pl.concat([
        episodes("baseline", {0: [False] * 10, 1: [False] * 10}),
        episodes("memory", {0: [True] * 5 + [False] * 5, 1: [True] * 5 + [False] * 5})])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert (row["runs"], row["difference"], row["smallest_p"]) == (2, 0.5, 0.5)
    assert row["p_value"] == 0.5 and not row["resolved"]  # 2 runs: half the sign patterns are as extreme
    plan, = comparisons.plans
    assert plan.startswith("memory: 2 paired runs cannot reach p < 0.05 whatever they show (a sign-flip test "
                           "over 2 runs cannot go below 0.5; 6 runs can); a difference of +0.500 with "
                           "between-run sd 0.000")
    assert "below the noise floor" not in plan


def test_a_difference_below_the_noise_floor_is_said_to_be():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, True]}),
        episodes("memory", {0: [True, False, True, True], 1: [False, True, False, True]})])
    row = paired_comparisons(frame, ["variant"]).table.row(0, named=True)
    assert (row["pairs"], row["gained"], row["lost"], row["difference"]) == (8, 1, 0, 0.125)
    plan, = paired_comparisons(frame, ["variant"]).plans
    assert plan.endswith("the difference is below the noise floor (1.000): within the noise of running "
                         "either group twice")


def test_equal_outcomes_leave_nothing_to_plan():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, True]}),
        episodes("memory", {0: [False, True, True, False], 1: [True, False, False, True]})])
    plan, = paired_comparisons(frame, ["variant"]).plans
    assert "no difference observed; nothing to plan" in plan


def test_one_pair_of_runs_gives_no_interval_about_the_variant_only_about_its_tasks():
    frame = pl.concat([episodes("baseline", {0: [True, False, False, False]}),
                       episodes("memory", {0: [True, True, True, False]})]).drop("repeat")
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert row["runs"] == 1
    assert (row["ci_low"], row["ci_high"], row["p_value"], row["p_holm"]) == (None, None, None, None)
    assert row["resolved"] is False and row["within_low"] <= 0.5 <= row["within_high"]
    assert comparisons.plans[0].startswith("memory: one pair of runs says nothing about the variant")
