"""ScienceWorld: a pool of task variations listed without a JVM, episodes in JVMs of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from envs.scienceworld import TABLE_VERSION, VARIATIONS, ScienceWorldTasks, gold_actions, requirements
from tests import tiers
from tests.conftest import run_variant

try:
    requirements()
    MISSING = ""
except ValueError as error:
    MISSING = str(error)
needs_scienceworld = pytest.mark.skipif(bool(MISSING), reason=MISSING)

ROOT = Path(__file__).resolve().parents[2]
TYPE = "find-non-living-thing"


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(pid) for pid in pids)


@pytest.fixture(scope="module")
@tiers.starts_processes
def env():
    env = ScienceWorldTasks(task_types=[TYPE], variations_per_task=2, seed=0, max_steps=12, warm_jvms=1)
    env.setup(env.tasks())
    yield env
    env.close()


@needs_scienceworld
def test_the_pool_is_stable_for_a_seed_and_depends_on_it():
    def pool(seed: int, split: str = "train") -> list[str]:
        env = ScienceWorldTasks(task_types=[TYPE, "power-component"], split=split,
                                variations_per_task=3, seed=seed)
        return [t.task_id for t in env.tasks()]

    assert pool(0) == pool(0) and pool(0) != pool(1)
    ids = pool(0)
    assert [i.split(":")[0] for i in ids] == [TYPE] * 3 + ["power-component"] * 3
    assert all(0 <= int(i.split(":")[1]) < VARIATIONS[TYPE][1] for i in ids[:3])
    total, _, dev_end = VARIATIONS["power-component"]
    assert all(dev_end <= int(i.split(":")[1]) < total for i in pool(0, "test")[3:])


@needs_scienceworld
def test_families_are_task_types_with_the_defaults_when_none_are_given():
    tasks = ScienceWorldTasks(task_types=None, variations_per_task=4).tasks()
    assert {t.family for t in tasks} == set(ScienceWorldTasks.default_families)
    assert len(tasks) == 4 and len({t.question for t in tasks}) == 4
    with pytest.raises(ValueError, match=r"env\.task_types: unknown \['boiling'\]; choose from .*'boil'"):
        ScienceWorldTasks(task_types=["boiling"])
    assert len(ScienceWorldTasks(task_types=ScienceWorldTasks.interleaved_families).tasks()) == 40


def test_without_java_the_env_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ValueError, match=r"needs Java 17\+ \(java not found on PATH\); install it, e\.g\. "
                                         r"apt-get install openjdk-17-jre-headless"):
        ScienceWorldTasks()


@pytest.mark.slow
def test_an_old_java_is_refused(monkeypatch, tmp_path):
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match=rf"needs Java 17\+ \(found Java 11 at {java}\)"):
        ScienceWorldTasks()


def test_without_the_package_the_env_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "scienceworld", None)
    with pytest.raises(ValueError, match=r"needs the scienceworld package; install it, e\.g\. pip install"):
        ScienceWorldTasks()


@needs_scienceworld
def test_following_the_gold_actions_through_the_env_interface_succeeds_the_same_way_twice(env):
    task = env.tasks()[0]
    gold = gold_actions(env.java, TYPE, task.metadata["variation"])
    runs = []
    for _ in range(2):
        episode = env.reset(task)
        opening, opening_score = episode.observation, episode.score().score
        assert opening.startswith("Your task is to find a(n) non-living thing.")
        assert "Valid actions: " in opening and "Reply with exactly one action." in opening
        results = [episode.step(action) for action in gold]
        score = episode.score()
        assert episode.done and score.success and score.score == 1.0
        assert sum(r.reward for r in results) == pytest.approx(1.0 - opening_score)
        assert not alive(episode.pid)  # a finished episode has already let its JVM go
        episode.close()
        runs.append([opening, *(r.observation for r in results)])
    # A JVM per episode: the same actions see the same text (object order included).
    assert runs[0] == runs[1]


@needs_scienceworld
def test_wrong_moves_neither_succeed_nor_end_before_the_step_limit(env):
    episode = env.reset(env.tasks()[1])
    opening = episode.score()
    results = [episode.step("dance wildly\nand more") for _ in range(env.max_steps)]
    assert [r.done for r in results] == [False] * (env.max_steps - 1) + [True]
    assert episode.steps == env.max_steps and "No known action matches" in results[0].observation
    assert all(r.reward == 0.0 for r in results)
    score = episode.score()
    assert not score.success and score.score == opening.score < 1.0
    assert score.response and score.response.endswith("not completed")
    episode.close()


@needs_scienceworld
def test_a_failed_task_ends_at_once_and_scores_zero(env):
    # Variation 17 starts outside by some eggs: focusing on a living thing fails the task (-100).
    task = env.tasks()[0].model_copy(update={"task_id": f"{TYPE}:17", "metadata": {"task_type": TYPE,
                                                                                   "variation": 17}})
    episode = env.reset(task)
    opening = episode.score().score
    assert "a dove egg" in episode.observation
    result = episode.step("focus on dove")
    assert result.done and result.reward == -opening  # the points it had are lost, none below 0
    assert episode.score().model_dump() == {"success": False, "score": 0.0, "reason": None,
                                            "response": "1 steps, score -100/100, failed"}


@needs_scienceworld
def test_no_jvm_outlives_close(env):
    episode = env.reset(env.tasks()[0])
    assert alive(episode.pid)
    episode.close()
    assert not alive(episode.pid)
    dropped = env.reset(env.tasks()[1]).pid  # never closed, garbage at once
    assert not alive(dropped)
    spares = [spare.result().pid for spare in env._spares]
    assert spares and all(alive(pid) for pid in spares)
    env.close()
    assert not any(alive(pid) for pid in spares)


@pytest.mark.slow
@needs_scienceworld
def test_a_jvm_dies_with_its_python_process_even_on_kill_9():
    script = textwrap.dedent(f"""
        import time
        from envs.scienceworld import ScienceWorldTasks
        env = ScienceWorldTasks(task_types=[{TYPE!r}], variations_per_task=1, warm_jvms=1)
        episode = env.reset(env.tasks()[0])
        print(episode.pid, env._spares[0].result().pid, flush=True)
        time.sleep(120)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        jvms = [int(pid) for pid in child.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(jvms) == 2 and all(alive(pid) for pid in jvms)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert gone_within(jvms, 10)


@pytest.mark.slow
@needs_scienceworld
def test_the_built_in_split_table_is_what_the_simulator_reports(tmp_path, monkeypatch):
    # Another scienceworld version has its table measured once, then read from the cache.
    env = ScienceWorldTasks(task_types=list(VARIATIONS), variations_per_task=1, cache_dir=str(tmp_path))
    built_in = env.tasks()
    other = ScienceWorldTasks(task_types=list(VARIATIONS), variations_per_task=1, cache_dir=str(tmp_path))
    monkeypatch.setattr(other, "version", f"{TABLE_VERSION}-other")
    assert other.tasks() == built_in
    assert other._measured_table() == VARIATIONS
    assert [p.name for p in tmp_path.iterdir()] == [f"variations-{TABLE_VERSION}-other.json"]


@pytest.mark.slow
@needs_scienceworld
def test_a_multi_step_run_records_steps_that_add_up_to_the_act_tokens():
    run = run_variant("env=scienceworld", f"env.task_types=[{TYPE}]", "env.variations_per_task=2",
                      "env.max_steps=3", "env.warm_jvms=0", "stream.num_tasks=2", "stream.tuning_size=0")
    steps = run.rows["steps"]
    assert len(run.rows["episodes"]) == 2
    for episode in run.rows["episodes"]:
        own = [s for s in steps if s["episode_id"] == episode["episode_id"]]
        assert [s["step"] for s in own] == [1, 2, 3] and own[-1]["done"]
        assert sum(s["prompt_tokens"] + s["completion_tokens"] for s in own) == episode["act_tokens"]
        assert all(s["reward"] == 0.0 for s in own) and not episode["success"]
