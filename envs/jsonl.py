"""Your own tasks: one JSON object per line, `{"id", "question", "answer"}` plus optional
`family`, `aliases`, `answer_pattern` (a regex whose `answer` group is taken from a matching reply,
e.g. for "The plural of mouse is mice.") and `metadata`. Every line is validated before the run
starts; a bad line stops it with its line number and field, never skipped silently. Scored by
`env.scorer` (envs/scorers/), by default `exact`: the answer line equal to the answer or an alias
after folding case, accents, punctuation and spacing; `numeric`, `math`, `choice`, ... read other
kinds of answers.

`env.tuning_path` may name a second file of the same form as the tuning split (for OPRO); it must
share no id or question with the main file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envs.base import EnvEpisode, Environment, SingleTurnEpisode, Task, nonfinite_answer
from envs.scorers import scorer as make_scorer


class TaskLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str
    family: str = Field(default="default", min_length=1)
    aliases: list[str] = []
    answer_pattern: str | None = None
    metadata: dict[str, Any] = {}

    @field_validator("answer_pattern")
    @classmethod
    def _pattern_has_an_answer_group(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compiled = re.compile(value)
            except re.error as error:
                raise ValueError(f"not a valid regular expression ({error})") from None
            if "answer" not in compiled.groupindex:
                raise ValueError("needs a named group (?P<answer>...)")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _numbers_are_answers_too(cls, value: Any) -> Any:
        if (why := nonfinite_answer(value)) is not None:
            raise ValueError(why)
        if isinstance(value, dict | list):  # its text would be "{'v': 2}", which no reply gives
            kind = "a mapping" if isinstance(value, dict) else "a list"
            raise ValueError(f"{kind} ({json.dumps(value)[:60]}), not an answer: write the answer as text "
                             "(other accepted answers go in aliases)")
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def read_tasks(path: Path) -> list[Task]:
    if not path.is_file():
        raise ValueError(f"{path}: no such task file")
    tasks: list[Task] = []
    first_line_of: dict[str, int] = {}
    # Split the bytes, not the text: only \n, \r\n and \r end a line, as in an editor.
    for number, data in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            raw = data.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            column = len(data[:error.start].decode("utf-8", errors="replace")) + 1
            raise ValueError(f"{path.name} line {number}: not UTF-8 text (byte {data[error.start]:#04x} at "
                             f"column {column}); save the file as UTF-8") from None
        if not raw.strip():
            continue
        try:
            line = TaskLine.model_validate(json.loads(raw))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path.name} line {number}: not valid JSON ({error.msg})") from None
        except ValidationError as error:
            problem = error.errors()[0]
            field = ".".join(str(p) for p in problem["loc"]) or "line"
            message = problem["msg"].removeprefix("Value error, ")
            raise ValueError(f"{path.name} line {number}: {field}: {message}") from None
        if line.id in first_line_of:
            raise ValueError(f"{path.name} line {number}: id: {line.id!r} is already used on line "
                             f"{first_line_of[line.id]}")
        first_line_of[line.id] = number
        tasks.append(Task(task_id=line.id, family=line.family, question=line.question, answer=line.answer,
                          aliases=tuple(line.aliases), answer_pattern=line.answer_pattern,
                          metadata=line.metadata))
    if not tasks:
        raise ValueError(f"{path.name}: no tasks in the file")
    return tasks


class JsonlTasks(Environment):
    def __init__(self, path: str | None = None, tuning_path: str | None = None,
                 scorer: str | dict[str, Any] = "exact") -> None:
        if not path:
            raise ValueError("env.path: name your task file, e.g. env=jsonl env.path=tasks.jsonl")
        self.scorer = make_scorer(scorer)
        self._tasks = read_tasks(Path(path))
        self._tuning = read_tasks(Path(tuning_path)) if tuning_path else []
        for task in (*self._tasks, *self._tuning):
            try:
                self.scorer.check_reference(task)
            except ValueError as error:
                raise ValueError(f"task {task.task_id}: answer: {error}") from None

    def tasks(self) -> list[Task]:
        return self._tasks

    def tuning_tasks(self) -> list[Task]:
        return self._tuning

    def reset(self, task: Task) -> EnvEpisode:
        return SingleTurnEpisode(task, self.scorer)
