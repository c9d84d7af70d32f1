"""reasoning-gym: tasks scored by the generator's own score_answer."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from reasoning_gym.arithmetic.leg_counting import LegCountingDataset

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


def test_a_sweeps_jobs_share_one_generation_of_the_pool(monkeypatch):
    generated = []
    original = LegCountingDataset.__getitem__
    monkeypatch.setattr(LegCountingDataset, "__getitem__",
                        lambda self, index: generated.append(index) or original(self, index))
    settings = {"datasets": ["leg_counting"], "size": 7, "seed": 11,
                "options": {"leg_counting": {"max_animals": 4}}}
    with ThreadPoolExecutor(4) as jobs:  # a sweep's jobs plan in threads of one process
        pools = list(jobs.map(lambda _: ReasoningGym(**settings).tasks(), range(4)))
    assert all(pool == pools[0] for pool in pools) and sorted(generated) == list(range(7))
    episode = ReasoningGym(**settings).reset(pools[0][3])
    assert episode.observation == pools[0][3].question and len(generated) == 7  # reset generates nothing
    other = ReasoningGym(**{**settings, "options": {"leg_counting": {"max_animals": 5}}}).tasks()
    assert len(generated) == 14 and other != pools[0]  # other options are another pool


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
