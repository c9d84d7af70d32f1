"""Streams: seeded task sets, orders as permutations, scenarios that carry or reset, probes."""

import itertools

import pytest

from envs.countries import CountryFacts
from harness.agent_run.plan import build_plan
from harness.agent_run.streams import order_tasks, sample_tasks
from harness.config import ConfigError
from tests.conftest import run_variant, scripted_settings


def plan(tmp_path, *overrides):
    return build_plan(scripted_settings(*overrides), tmp_path)


def ids(spec):
    return [t.task_id for t in spec.tasks]


def test_the_same_seed_gives_the_same_stream(tmp_path):
    assert ids(plan(tmp_path, "seed=3")[0]) == ids(plan(tmp_path, "seed=3")[0])
    assert ids(plan(tmp_path, "seed=3")[0]) != ids(plan(tmp_path, "seed=4")[0])


def test_order_seeds_run_the_same_task_set_in_different_orders(tmp_path):
    specs = plan(tmp_path, "seeds=[0,1]", "stream.order_seeds=[10,11,12]", "stream.num_tasks=20")
    assert [(s.seed, s.order_seed) for s in specs] == [(0, 10), (0, 11), (0, 12), (1, 10), (1, 11), (1, 12)]
    first_seed = specs[:3]
    assert all(sorted(ids(s)) == sorted(ids(first_seed[0])) for s in first_seed)
    assert len({tuple(ids(s)) for s in first_seed}) == 3
    assert len({s.run_id for s in specs}) == 6


def test_interleaved_deals_families_round_robin_and_sequential_keeps_them_in_blocks():
    tasks = CountryFacts(families=["capital", "region", "demonym"]).tasks()[::20]
    interleaved = order_tasks(tasks, "interleaved", 0)
    blocks = order_tasks(tasks, "sequential", 0)
    assert sorted(t.task_id for t in interleaved) == sorted(t.task_id for t in tasks)
    assert [t.family for t in interleaved[:3]] == [t.family for t in interleaved[3:6]]
    assert len({t.family for t in interleaved[:3]}) == 3
    changes = sum(a.family != b.family for a, b in itertools.pairwise(blocks))
    assert changes == 2


def test_an_interleaved_stream_takes_all_the_envs_families_unless_told_otherwise(tmp_path):
    spec = plan(tmp_path, "stream=interleaved", "stream.num_tasks=10")[0]
    assert spec.env_cfg["families"] == ["capital", "region", "demonym", "currency_code", "calling_code"]
    assert [t.family for t in spec.tasks[:5]] != [spec.tasks[0].family] * 5
    assert plan(tmp_path, "stream=sequential")[0].env_cfg["families"] == ["capital"]
    chosen = plan(tmp_path, "stream=interleaved", "env.families=[capital,region]")[0]
    assert {t.family for t in chosen.tasks} == {"capital", "region"}
    with pytest.raises(ConfigError, match="interleaved needs several task families; env 'countries' has "
                                          "one here \\(capital\\)"):
        plan(tmp_path, "stream=interleaved", "env.families=[capital]")


def test_sequential_carries_memory_and_isolated_starts_every_task_fresh():
    carried = run_variant("variant=memory", "stream=sequential", "stream.num_tasks=5")
    fresh = run_variant("variant=memory", "stream=isolated", "stream.num_tasks=5")
    assert [e["memory_size"] for e in carried.rows["episodes"]] == [1, 2, 3, 4, 5]
    assert [e["memory_size"] for e in fresh.rows["episodes"]] == [1, 1, 1, 1, 1]
    assert not [e for e in fresh.rows["memory_events"] if e["event"] == "retrieve"]
    assert {e["scenario"] for e in fresh.rows["episodes"]} == {"isolated"}


def test_probes_replay_the_first_tasks_without_learning_from_them():
    run = run_variant("variant=memory", "stream.num_tasks=6", "stream.probe_every=3", "stream.probe_size=2")
    episodes = run.rows["episodes"]
    probes = [e for e in episodes if e["probe"]]
    first_two = [e["task_id"] for e in episodes if not e["probe"]][:2]
    assert len(episodes) == 6 + 2 * 2
    assert [p["task_id"] for p in probes] == first_two * 2
    assert [p["stream_position"] for p in probes] == [2, 2, 5, 5]
    assert len({e["episode_id"] for e in episodes}) == len(episodes)
    inserts = [e for e in run.rows["memory_events"] if e["event"] == "insert"]
    assert len(inserts) == 6  # probes are not learnt from
    assert all(p["memory_size"] == next(e["memory_size"] for e in episodes if not e["probe"]
                                        and e["stream_position"] == p["stream_position"]) for p in probes)


def test_episode_ids_tie_every_row_to_its_episode():
    run = run_variant("variant=reflexion", "stream.num_tasks=4", "stream.probe_every=2",
                      "stream.probe_size=1", "model.scripted.accuracy=0")
    episode_ids = {e["episode_id"] for e in run.rows["episodes"]}
    for table in ("llm_calls", "attempts"):
        assert {r["episode_id"] for r in run.rows[table]} == episode_ids
    for episode in run.rows["episodes"]:
        own = [c for c in run.rows["llm_calls"] if c["episode_id"] == episode["episode_id"]]
        assert episode["total_tokens"] == sum(c["total_tokens"] for c in own)


def test_an_ordered_pool_keeps_its_order_in_every_scenario():
    """An env with its `order_option` set (env=dataset's order_by): the seed draws the set, the pool's
    order runs it (tests/envs/test_dataset.py plans such streams)."""
    pool = CountryFacts(families=["capital", "region"]).tasks()[::25]
    drawn = sample_tasks(pool, 8, seed=3, ordered=True)
    assert {t.task_id for t in drawn} == {t.task_id for t in sample_tasks(pool, 8, seed=3)}
    assert drawn == sorted(drawn, key=pool.index)
    for scenario in ("sequential", "isolated"):
        assert order_tasks(drawn, scenario, order_seed=7, ordered=True) == drawn
    interleaved = order_tasks(drawn, "interleaved", order_seed=7, ordered=True)
    families = list(dict.fromkeys(t.family for t in drawn))
    for family in families:
        assert [t for t in interleaved if t.family == family] == [t for t in drawn if t.family == family]
    assert interleaved[0].family == families[0] and interleaved[1].family == families[1]
