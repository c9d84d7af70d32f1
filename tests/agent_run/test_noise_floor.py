"""stream.repeats: the same agent run repeated on the same tasks, and the noise floor it measures."""

from __future__ import annotations

import asyncio
import math
import tempfile
from pathlib import Path

import polars as pl

from harness.agent_run.assembly import build_agent
from harness.agent_run.plan import build_environment, build_plan
from harness.agent_run.runner import run_agent
from harness.config import CacheSettings
from harness.models.gateway import Gateway
from harness.models.model_client import AgentModelClient
from harness.report.compare import across_repeats, noise_floor, paired_comparisons
from harness.report.stats import pairs_needed
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


def test_with_repeats_the_plan_uses_every_repeat_against_every_repeat():
    # Each group solves each task in one repeat of two; repeat i against repeat i happens to agree
    # on all but one pair (1 gained of 8), but a fresh pair of single runs disagrees half the time.
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, True]}),
        episodes("memory", {0: [True, False, True, True], 1: [False, True, False, True]})])
    comparisons = paired_comparisons(frame, ["variant"])
    row = comparisons.table.row(0, named=True)
    assert (row["pairs"], row["gained"], row["lost"], row["difference"]) == (8, 1, 0, 0.125)
    # Shares (baseline a, memory b) per task: (.5, .5) x 3 and (.5, 1); gained (1-a)b, lost a(1-b).
    gained, lost = (3 * 0.25 + 0.5) / 4, (3 * 0.25 + 0.0) / 4
    across = across_repeats(*(frame.filter(pl.col("variant") == v) for v in ("baseline", "memory")))
    assert across is not None and (across["gained"], across["lost"]) == (gained, lost)
    # Connor (1987) with discordance 0.5 and difference 0.125, by hand; the 1-of-8 pairing gives 61.
    z_alpha, z_power = 1.959964, 0.841621
    delta, discordant = gained - lost, gained + lost
    by_hand = math.ceil((z_alpha * math.sqrt(discordant) + z_power * math.sqrt(discordant - delta**2)) ** 2
                        / delta**2)
    assert by_hand == 249 and across["needed"] == by_hand and pairs_needed(1, 0, 8) == 61
    assert comparisons.plans == [
        "memory: a difference of +0.125 with the discordance measured across 2 x 2 repeats (every repeat "
        "against every repeat: 0.500 of pairs disagree; test-retest flip rates 0.750 and 1.000 for this "
        "group and the reference) needs about 249 paired episodes for 80% power at 5% (e.g. 249 tasks x 1 "
        "seeds; now 8). The difference is below the noise floor (1.000): within the noise of running "
        "either group twice"]


def test_a_difference_above_the_noise_floor_is_not_said_to_be_below_it():
    frame = pl.concat([
        episodes("baseline", {0: [False] * 10, 1: [False] * 10}),
        episodes("memory", {0: [True] * 5 + [False] * 5, 1: [True] * 5 + [False] * 5})])
    plan, = paired_comparisons(frame, ["variant"]).plans
    assert plan == (
        "memory: a difference of +0.500 with the discordance measured across 2 x 2 repeats (every repeat "
        "against every repeat: 0.500 of pairs disagree; test-retest flip rates 0.000 and 0.000 for this "
        "group and the reference) needs about 14 paired episodes for 80% power at 5% (e.g. 14 tasks x 1 "
        "seeds; now 20)")


def test_equal_gained_and_lost_rates_across_repeats_leave_nothing_to_plan():
    frame = pl.concat([
        episodes("baseline", {0: [True, False, True, False], 1: [False, True, False, True]}),
        episodes("memory", {0: [False, True, True, False], 1: [True, False, False, True]})])
    assert paired_comparisons(frame, ["variant"]).plans == [
        "memory: no difference observed across 2 x 2 repeats (every repeat against every repeat: 0.250 of "
        "pairs gained, 0.250 lost); nothing to plan"]


def test_without_repeats_the_plan_uses_the_pairs_in_the_table():
    frame = pl.concat([episodes("baseline", {0: [True, False, False, False]}),
                       episodes("memory", {0: [True, True, True, False]})]).drop("repeat")
    assert paired_comparisons(frame, ["variant"]).plans == [
        "memory: a difference of +0.500 with this discordance (2 of 4 pairs) needs about 14 paired episodes "
        "for 80% power at 5% (e.g. 14 tasks x 1 seeds; now 4)"]
    one_repeat = pl.concat([episodes("baseline", {0: [True, False]}), episodes("memory", {0: [True, True]})])
    assert "with this discordance (1 of 2 pairs)" in paired_comparisons(one_repeat, ["variant"]).plans[0]
