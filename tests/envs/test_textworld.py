"""TextWorld: games generated once into a cache, played step by step through the env interface."""

import pytest

from envs.textworld import TextWorldGames, strip_banner
from tests import tiers
from tests.conftest import run_variant


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tw-cache")


@pytest.fixture(scope="module")
@tiers.starts_processes  # TextWorld compiles its games with Inform 7's `ni`
def env(cache):
    env = TextWorldGames(challenge="tw-cooking", num_games=2, seed=5, max_steps=20,
                         settings={"recipe": 1, "take": 1, "go": 1}, cache_dir=str(cache))
    env.setup(env.tasks())
    return env


def walkthrough(env, task):
    import textworld

    return textworld.Game.load(str(env.game_file(task).with_suffix(".json"))).metadata["walkthrough"]


@pytest.mark.slow
def test_following_the_walkthrough_through_the_env_interface_wins(env):
    task = env.tasks()[0]
    episode = env.reset(task)
    assert "Admissible commands:" in episode.observation and "$$" not in episode.observation
    rewards = [episode.step(command).reward for command in walkthrough(env, task)]
    score = episode.score()
    assert episode.done and score.success and score.score == 1.0 and sum(rewards) > 0
    episode.close()


def test_wrong_moves_neither_win_nor_end_before_the_step_limit(env):
    episode = env.reset(env.tasks()[1])
    for _ in range(20):
        result = episode.step("dance wildly")
    assert result.done and episode.steps == 20 and not episode.score().success
    episode.close()


def test_games_are_generated_once_and_reused_from_the_cache(env, cache):
    files = sorted(cache.rglob("*.z8"))
    assert len(files) == 2
    stamps = [f.stat().st_mtime_ns for f in files]
    again = TextWorldGames(challenge="tw-cooking", num_games=2, seed=5,
                           settings={"recipe": 1, "take": 1, "go": 1}, cache_dir=str(cache))
    again.setup(again.tasks())
    assert [f.stat().st_mtime_ns for f in sorted(cache.rglob("*.z8"))] == stamps


def test_the_banner_is_stripped_and_the_text_kept():
    text = "  ________ \n |  \\  $$ |\n  \\$$$$$$  \n\nYou are hungry! Let's cook.\n\n-= Kitchen =-"
    assert strip_banner(text) == "You are hungry! Let's cook.\n\n-= Kitchen =-"


@pytest.mark.slow  # compiles the games (Inform 7's `ni`) where `env` has not already
def test_a_multi_step_run_records_steps_that_add_up_to_the_act_tokens(cache):
    run = run_variant("env=textworld", f"env.cache_dir={cache}", "env.num_games=2", "env.seed=5",
                      "env.max_steps=4", "stream.num_tasks=2", "stream.tuning_size=0")
    steps = run.rows["steps"]
    for episode in run.rows["episodes"]:
        own = [s for s in steps if s["episode_id"] == episode["episode_id"]]
        assert [s["step"] for s in own] == [1, 2, 3, 4] and own[-1]["done"]
        assert sum(s["prompt_tokens"] + s["completion_tokens"] for s in own) == episode["act_tokens"]
        assert not episode["success"] and episode["score"] == 0.0
