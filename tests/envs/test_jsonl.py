"""Your own tasks from JSONL: validated line by line; a bad line stops the run with its number."""

import json

import pytest

from envs.jsonl import JsonlTasks
from harness.agent_run.plan import build_plan
from harness.config import ConfigError
from tests.conftest import run_variant, scripted_settings

GOOD = [{"id": "q1", "question": "2+2?", "answer": 4},
        {"id": "q2", "question": "Capital of Peru?", "answer": "Lima", "family": "capital",
         "aliases": ["Lima, Peru"], "metadata": {"source": "me"}},
        {"id": "q3", "question": "Opposite of hot?", "answer": "cold"}]


def write(path, rows, raw_lines=()):
    path.write_text("\n".join([*(json.dumps(r) for r in rows), *raw_lines]) + "\n")
    return path


def test_a_valid_file_becomes_tasks(tmp_path):
    env = JsonlTasks(path=str(write(tmp_path / "t.jsonl", GOOD)))
    tasks = env.tasks()
    assert [t.task_id for t in tasks] == ["q1", "q2", "q3"]
    assert tasks[0].answer == "4" and tasks[0].family == "default"
    assert tasks[1].aliases == ("Lima, Peru",) and tasks[1].metadata == {"source": "me"}
    episode = env.reset(tasks[1])
    episode.step("lima, peru")
    assert episode.score().success


@pytest.mark.parametrize("rows,raw,message", [
    ([*GOOD[:2], {"id": "q3", "question": "x"}], (), "t.jsonl line 3: answer: Field required"),
    (GOOD[:1], ('{"id": "q2", "question": "x", "answer": }',), "t.jsonl line 2: not valid JSON"),
    ([*GOOD, {"id": "q1", "question": "again", "answer": "x"}], (),
     "t.jsonl line 4: id: 'q1' is already used on line 1"),
    ([*GOOD[:1], {"id": "q2", "question": "x", "answer": "y", "colour": "red"}], (),
     "t.jsonl line 2: colour: Extra inputs are not permitted"),
    ([*GOOD[:1], {"id": "", "question": "x", "answer": "y"}], (), "t.jsonl line 2: id: String should have"),
    ([], (), "t.jsonl: no tasks in the file"),
])
def test_a_bad_file_names_the_line_and_field(tmp_path, rows, raw, message):
    path = write(tmp_path / "t.jsonl", rows, raw)
    with pytest.raises(ValueError) as caught:
        JsonlTasks(path=str(path))
    assert str(caught.value).startswith(message)


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"id": "q1", "question": "2+2?", "answer": "4"}\n'
                     b'{"id": "q2", "question": "\xc3\xa9caf\xe9?", "answer": "y"}\n')
    with pytest.raises(ValueError) as caught:
        JsonlTasks(path=str(path))
    assert str(caught.value).startswith("t.jsonl line 2: not UTF-8 text (byte 0xe9 at column 31)")


def test_a_byte_order_mark_and_unicode_line_separators_are_text(tmp_path):
    row = {"id": "q1", "question": "one\u2028two", "answer": "x"}
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row, ensure_ascii=False).encode() + b"\r\n")
    assert [t.question for t in JsonlTasks(path=str(path)).tasks()] == ["one\u2028two"]


def test_the_run_refuses_to_start_on_a_bad_line(tmp_path):
    path = write(tmp_path / "t.jsonl", [*GOOD[:2], {"id": "q3", "question": "x"}])
    with pytest.raises(ConfigError, match=r"^invalid config: env: ValueError: t.jsonl line 3: answer"):
        build_plan(scripted_settings("env=jsonl", f"env.path={path}", "stream.tuning_size=0",
                                     "stream.num_tasks=2"), tmp_path)


def test_a_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.path: name your task file"):
        build_plan(scripted_settings("env=jsonl"), tmp_path)


def test_relative_paths_are_resolved_where_the_run_starts(tmp_path, monkeypatch):
    write(tmp_path / "t.jsonl", GOOD)
    monkeypatch.chdir(tmp_path)
    settings = scripted_settings("env=jsonl", "env.path=t.jsonl")
    assert settings.env.kwargs()["path"] == str(tmp_path / "t.jsonl")


def test_a_tuning_file_must_not_overlap(tmp_path):
    main = write(tmp_path / "t.jsonl", GOOD)
    overlap = write(tmp_path / "tune.jsonl", [{"id": "z", "question": "2+2?", "answer": "4"}])
    with pytest.raises(ConfigError, match="overlaps the evaluation pool"):
        build_plan(scripted_settings("env=jsonl", f"env.path={main}", f"env.tuning_path={overlap}",
                                     "stream.num_tasks=2"), tmp_path)


def test_jsonl_tasks_run_end_to_end_with_their_own_tuning_split(tmp_path):
    main = write(tmp_path / "t.jsonl", GOOD)
    tune = write(tmp_path / "tune.jsonl", [{"id": "z", "question": "3+3?", "answer": "6"}])
    run = run_variant("env=jsonl", f"env.path={main}", f"env.tuning_path={tune}", "variant=opro",
                      "variant.steps=1", "stream.num_tasks=3", "model.scripted.accuracy=1")
    assert [e["success"] for e in run.rows["episodes"]] == [True] * 3
    assert {e["protocol"] for e in run.rows["episodes"]} == {"held_out"}


def test_an_answer_pattern_takes_the_answer_out_of_a_sentence(tmp_path):
    row = {"id": "p", "question": "Plural of mouse?", "answer": "mice",
           "answer_pattern": r"(?:the )?plural of \w+ is (?P<answer>\w+)\.?"}
    env = JsonlTasks(path=str(write(tmp_path / "t.jsonl", [row])))
    episode = env.reset(env.tasks()[0])
    episode.step("The plural of mouse is mice.")
    assert episode.score().success


def test_a_pattern_without_an_answer_group_is_refused(tmp_path):
    row = {"id": "p", "question": "q", "answer": "a", "answer_pattern": "(.+)"}
    with pytest.raises(ValueError, match=r"line 1: answer_pattern: needs a named group"):
        JsonlTasks(path=str(write(tmp_path / "t.jsonl", [row])))


@pytest.mark.parametrize("answer, message", [
    ("NaN", "nan is not a finite number (NaN, Infinity or past 1.8e308); write the reference as text if "
            "that is what it is"),
    ("Infinity", "inf is not a finite number"),
    ("1e309", "inf is not a finite number"),
    ('{"v": 2}', 'a mapping ({"v": 2}), not an answer: write the answer as text (other accepted answers '
                 "go in aliases)"),
], ids=["nan", "infinity", "past-a-float", "mapping"])
def test_an_answer_that_is_no_text_is_refused_naming_the_line_not_read_as_nan(tmp_path, answer, message):
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{"id": "a", "question": "Q?", "answer": {answer}}}\n')
    with pytest.raises(ValueError) as caught:
        JsonlTasks(path=str(path))
    assert str(caught.value).startswith(f"t.jsonl line 1: answer: {message}")
