"""The options of env=dataset (conf/env/dataset.yaml) and its `fields`, how a row becomes a task:
checked before anything is read, a bad one refused with one line naming it (`env.fields.answer_regex:
...`)."""

from __future__ import annotations

from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envs.dataset_cells import template_names


class Fields(BaseModel):
    """How a row becomes a task (`env.fields`)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """The column of the task id; null: the row's index in its split."""
    question: str = Field(default="{question}", min_length=1)
    """What the agent is shown: a template over the row's columns."""
    answer: str = Field(default="answer", min_length=1)
    """The reference: a column, or a template (it holds a `{`)."""
    answer_regex: str | None = None
    """Takes the part of the answer that matters: its first group, else its whole match."""
    family: str | None = None
    """The column of the task's family; null: one family per source, named after it."""
    choices: str | list[str] | None = None
    """The options: a list column, or several columns, in the order they are lettered."""
    aliases: str | None = None
    """A column of other accepted answers (a list, or one string)."""

    @field_validator("question", "answer")
    @classmethod
    def _a_template_parses(cls, value: str) -> str:
        template_names(value)
        return value

    @field_validator("answer_regex")
    @classmethod
    def _a_regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                regex.compile(value)
            except regex.error as error:
                raise ValueError(f"not a valid regular expression ({error})") from None
        return value

    def answer_is_template(self) -> bool:
        return "{" in self.answer


class DatasetOptions(BaseModel):
    """The options of env=dataset (conf/env/dataset.yaml), checked before anything is read."""

    model_config = ConfigDict(extra="forbid")

    path: list[str] = Field(min_length=1)
    subset: str | None = None
    split: str = Field(min_length=1)
    revision: str | None = None
    fields: Fields
    filter: dict[str, Any] = {}
    limit: int | None = Field(default=None, ge=1)
    order_by: str | None = None
    shuffle_choices: bool = False
    scorer: str | dict[str, Any]
    tuning_split: str | None = None
    tuning_path: list[str] | None = None
    metadata: list[str] = []
    db_dir: str | None = None

    @field_validator("path", "tuning_path", mode="before")
    @classmethod
    def _one_or_several(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


def validated_options(values: dict[str, Any]) -> DatasetOptions:
    try:
        return DatasetOptions.model_validate(values)
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"env.{field}: {problem['msg'].removeprefix('Value error, ')}") from None

