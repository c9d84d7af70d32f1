"""stream.repeats: the same agent run repeated on the same tasks, and the noise floor it measures."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import polars as pl
import pytest

from harness.agent_run.assembly import build_agent
from harness.agent_run.components import build_environment
from harness.agent_run.plan import build_plan
from harness.agent_run.runner import run_agent
from harness.agent_run.spec import CheckedParams
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
        asyncio.run(run_agent(spec, CheckedParams.as_asked(settings.model), build_environment(spec.env_cfg),
                              gateway, sink))
        return [c["cached"] for c in sink.rows["llm_calls"]]

    assert not any(cached_calls(specs[0]))  # fills the cache
    assert not any(cached_calls(specs[1]))  # the other repeat: nothing reused
    assert all(cached_calls(specs[0]))  # the same repeat again: all from the cache


def episodes(variant: str, verdicts: dict[int, list[bool]], seed: int = 0) -> pl.DataFrame:
    """Episodes of one variant at one seed: for each repeat, its verdicts on tasks t0, t1, ..."""
    return pl.DataFrame([
        {"variant": variant, "run_id": f"{variant}-s{seed}-r{repeat}", "seed": seed, "order_seed": seed,
         "repeat": repeat, "stream_position": position, "task_id": f"s{seed}-t{position}", "success": success,
         "probe": False, "attempted": True}
        for repeat, successes in verdicts.items() for position, success in enumerate(successes)])


def test_the_flip_rate_is_the_share_of_tasks_whose_verdict_differs_between_repeats():
    frame = episodes("baseline", {0: [True, True, False, False], 1: [True, False, False, True]})
    row = noise_floor(frame, ["variant"]).row(0, named=True)
    assert (row["variant"], row["repeats"], row["tasks"], row["flip_rate"]) == ("baseline", 2, 4, 0.5)
    assert row["ci_low"] <= 0.5 <= row["ci_high"]
    assert row["retest_sd"] == 0.0  # two flips that cancel: the run's rate is 0.5 both times
    assert noise_floor(episodes("baseline", {0: [True, False]}), ["variant"]).is_empty()  # no repeats


def test_the_noise_floor_is_the_spread_of_a_runs_rate_between_repeats_not_the_flip_rate():
    # 100 tasks, 15 of which flip between two repeats, 8 one way and 7 the other: the flip rate is 0.15, yet
    # the run's rate moves by 0.01. A difference of 0.10 is far above that noise.
    first = [True] * 50 + [False] * 50
    second = list(first)
    for position in range(8):
        second[position] = False  # 8 solved tasks now failed
    for position in range(50, 57):
        second[position] = True  # 7 failed tasks now solved
    floors = noise_floor(episodes("baseline", {0: first, 1: second}), ["variant"]).row(0, named=True)
    assert floors["flip_rate"] == 0.15 and floors["retest_sd"] == pytest.approx(0.01 / 2**0.5)


def test_repeats_pair_repeat_by_repeat_and_each_difference_stands_beside_its_noise_floor():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, False, False], 1: [True, False, False, False]}),
        episodes("memory", {0: [True, True, True, False], 1: [True, True, False, False]})])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert row["pairs"] == 8  # 4 tasks x 2 repeats, each repeat with its own counterpart
    # memory's rate was 0.75, then 0.5: sd 0.177; baseline's 0.25 twice
    assert row["noise_floor"] == pytest.approx(0.25 / 2**0.5)


def test_repeats_of_one_seed_are_one_unit_however_many():
    # Identical repeats (greedy decoding: copies) of two seeds: four runs a side, two units. Counted as
    # runs, four all-positive differences would give p 0.125; counted as seeds they give 0.5.
    frame = pl.concat([
        episodes("baseline", dict.fromkeys(range(4), [False] * 10), seed=0),
        episodes("baseline", dict.fromkeys(range(4), [False] * 10), seed=1),
        episodes("memory", dict.fromkeys(range(4), [True] * 5 + [False] * 5), seed=0),
        episodes("memory", dict.fromkeys(range(4), [True] * 5 + [False] * 5), seed=1)])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert (row["runs"], row["seeds"], row["repeats"], row["unit"], row["units"]) == (8, 2, 4, "seed", 2)
    assert (row["difference"], row["smallest_p"], row["p_value"]) == (0.5, 0.5, 0.5) and not row["resolved"]
    plan, = comparisons.plans
    assert plan.startswith("memory: 2 paired seeds cannot reach p < 0.05 whatever they show (a sign-flip "
                           "test over 2 seeds cannot go below 0.5; 6 seeds with a difference can)")
    assert "test-retest" not in plan  # the repeats are copies: no noise


def test_order_seeds_count_as_units_only_when_asked():
    frame = pl.concat([
        episodes("baseline", {0: [False, False, True]}, seed=0),
        episodes("baseline", {0: [False, True, False]}, seed=0).with_columns(order_seed=pl.lit(1, pl.Int64)),
        episodes("memory", {0: [True, False, True]}, seed=0),
        episodes("memory", {0: [True, True, False]}, seed=0).with_columns(order_seed=pl.lit(1, pl.Int64))])
    by_seed = paired_comparisons(frame, ["variant"]).table.row(0, named=True)
    by_order = paired_comparisons(frame, ["variant"], unit="order").table.row(0, named=True)
    assert (by_seed["orders"], by_seed["units"], by_seed["unit"]) == (2, 1, "seed")
    assert (by_order["units"], by_order["unit"], by_order["p_value"]) == (2, "seed-order", 0.5)
    with pytest.raises(ValueError, match="unit 'task': one of seed, order"):
        paired_comparisons(frame, ["variant"], unit="task")


def test_a_difference_below_the_noise_floor_is_said_to_be():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, False]}, seed=seed)
        for seed in (0, 1)] + [
        episodes("memory", {0: [True, False, True, True], 1: [False, True, False, False]}, seed=seed)
        for seed in (0, 1)])
    row = paired_comparisons(frame, ["variant"]).table.row(0, named=True)
    assert (row["pairs"], row["gained"], row["lost"], row["difference"]) == (16, 2, 0, 0.125)
    plan, = paired_comparisons(frame, ["variant"]).plans
    assert plan.endswith("the difference is within the test-retest spread of a run's rate (0.354): within "
                         "the noise of running either group twice")


def test_equal_outcomes_leave_nothing_to_plan():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, True]}, seed=seed)
        for seed in (0, 1)] + [
        episodes("memory", {0: [False, True, True, False], 1: [True, False, False, True]}, seed=seed)
        for seed in (0, 1)])
    plan, = paired_comparisons(frame, ["variant"]).plans
    assert "no difference observed; nothing to plan" in plan


def test_one_seed_gives_no_interval_about_the_variant_only_about_its_tasks():
    frame = pl.concat([episodes("baseline", {0: [True, False, False, False], 1: [True, False, False, False]}),
                       episodes("memory", {0: [True, True, True, False], 1: [True, True, True, False]})])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert (row["runs"], row["units"]) == (2, 1)
    assert (row["ci_low"], row["ci_high"], row["p_value"], row["p_holm"]) == (None, None, None, None)
    assert row["resolved"] is False and row["within_low"] <= 0.5 <= row["within_high"]
    assert comparisons.plans[0].startswith("memory: one paired seed says nothing about the variant")
