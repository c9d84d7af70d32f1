"""Country facts: a real task pool from the countryinfo package, checked by exact match."""

import pytest

from envs.base import Task, extract_answer, normalize
from envs.countries import FAMILIES, CountryFacts


def test_pool_is_real_data_with_unique_ids_per_family():
    env = CountryFacts(families=["capital", "demonym"])
    tasks = env.tasks()
    assert len({t.task_id for t in tasks}) == len(tasks)
    capitals = {t.task_id: t.answer for t in tasks if t.family == "capital"}
    assert capitals["capital:FRA"] == "Paris" and capitals["capital:JPN"] == "Tokyo"
    assert len(capitals) > 200


def test_every_family_builds_a_pool():
    for family in FAMILIES:
        assert len(CountryFacts(families=[family]).tasks()) > 150, family


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match=r"env.families: unknown \['moons'\]"):
        CountryFacts(families=["moons"])


def answer(task: Task, reply: str) -> tuple[bool, str | None]:
    episode = CountryFacts().reset(task)
    result = episode.step(reply)
    score = episode.score()
    assert result.done and episode.done and result.reward == score.score
    return score.success, score.response


def france() -> Task:
    return next(t for t in CountryFacts().tasks() if t.task_id == "capital:FRA")


@pytest.mark.parametrize("reply", ["Paris", "  paris.", "Answer: Paris", "PARIS\nIt is in France.",
                                   "The capital city of France is Paris.", "The capital of France is Paris"])
def test_exact_answer_after_normalisation_and_declared_sentence_form(reply):
    success, response = answer(france(), reply)
    assert success and normalize(response) == "paris"


@pytest.mark.parametrize("reply", ["Lyon", "Paris, France", "I think Paris", "",
                                   "The capital city of France is Lyon.", "Paris is the capital of France."])
def test_anything_else_fails(reply):
    success, _ = answer(france(), reply)
    assert not success


def test_sentence_form_is_accepted_only_where_the_task_declares_it():
    plain = Task(task_id="t", family="f", question="q", answer="Paris")
    episode = CountryFacts().reset(plain)
    episode.step("The capital city of France is Paris.")
    assert not episode.score().success


def test_a_done_episode_refuses_another_step():
    episode = CountryFacts().reset(france())
    episode.step("Paris")
    with pytest.raises(RuntimeError, match="already done"):
        episode.step("Paris")


def test_normalize_folds_case_accents_punctuation_and_spaces():
    assert normalize("  São-Tomé. ") == normalize("sao tome") == "sao tome"
    assert normalize("Nuku\u2019alofa") == normalize("Nuku'alofa")
    assert extract_answer("\n\n final answer: Rome \nmore") == "Rome"


def test_a_tasks_answer_pattern_that_backtracks_without_end_takes_the_line_whole():
    line = "x" * 5000
    assert extract_answer(line, r"(?P<answer>(x+x+)+)y") == line
    assert extract_answer("Answer: the capital is Rome", r"the capital is (?P<answer>\w+)") == "Rome"
