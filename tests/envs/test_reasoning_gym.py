"""reasoning-gym: tasks scored by the generator's own score_answer."""

import pytest

from envs.reasoning_gym import ReasoningGym


@pytest.fixture(scope="module")
def env():
    return ReasoningGym(datasets=["leg_counting", "basic_arithmetic"], size=5, seed=3)


def test_pool_has_every_item_of_every_dataset_with_stable_ids(env):
    tasks = env.tasks()
    assert [t.task_id for t in tasks][:2] == ["leg_counting:0", "leg_counting:1"]
    assert len(tasks) == 10 and {t.family for t in tasks} == {"leg_counting", "basic_arithmetic"}
    assert all("<answer>" in t.question for t in tasks)


def test_a_fresh_env_with_the_same_seed_regenerates_the_same_tasks(env):
    again = ReasoningGym(datasets=["leg_counting", "basic_arithmetic"], size=5, seed=3)
    assert again.tasks() == env.tasks()


@pytest.mark.parametrize("template,expected", [("Thinking first.\n<answer>{}</answer>", 1.0),
                                               ("{}", 1.0), ("<answer>no idea</answer>", 0.0)])
def test_reference_answers_score_one_and_wrong_ones_zero(env, template, expected):
    for task in env.tasks():
        episode = env.reset(task)
        episode.step(template.format(task.answer))
        score = episode.score()
        assert score.score == expected and score.success == (expected == 1.0), task.task_id


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(ValueError, match=r"env\.datasets: unknown \['no_such_gym'\]"):
        ReasoningGym(datasets=["no_such_gym"])
