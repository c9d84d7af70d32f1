"""How the rows of a dataset become tasks (`env.fields` and the options that pick rows): the columns
checked against what the fields name, a row kept or filtered out, and one row made a task, its options
in the dataset's order or shuffled by a seed."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.base import Task
from envs.dataset_cells import (
    CHOICES,
    LETTERS,
    SCHEMA,
    RowError,
    answer_search,
    check_answer,
    choice_index,
    lettered,
    plain,
    render,
    sqlite_schema,
    template_names,
    text,
)
from envs.dataset_options import DatasetOptions


@dataclass
class Source:
    """One dataset read: its rows (the columns the task needs), as named in messages."""

    label: str
    """`gsm8k.jsonl`, `openai/gsm8k[test]`."""
    name: str
    """Short: a family's default name, the prefix of ids when several sources are read together."""
    rows: list[dict[str, Any]]


Row = tuple[Source, int, dict[str, Any]]
"""A row with its source and its index there."""


class FieldMapping:
    """How a row of the sources becomes a task, by the options' fields."""

    def __init__(self, options: DatasetOptions) -> None:
        self.options = options
        self.fields = options.fields

    def check_columns(self, label: str, columns: list[str]) -> list[str]:
        """The columns the tasks are made of, each one there (else a ValueError naming the field)."""
        fields, options = self.fields, self.options
        placeholders = {CHOICES} if fields.choices is not None else set()
        placeholders |= {SCHEMA} if options.db_dir else set()
        choices = [fields.choices] if isinstance(fields.choices, str) else fields.choices or []
        named = [("fields.id", fields.id), ("fields.family", fields.family),
                 ("fields.aliases", fields.aliases),
                 *((f"fields.{key}", column) for key in ("question", "answer")
                   for column in sorted(template_names(getattr(fields, key))) if column not in placeholders),
                 *(("fields.choices", column) for column in choices),
                 *(("env.metadata", column) for column in options.metadata),
                 *(("env.filter", column) for column in options.filter),
                 ("env.order_by", options.order_by), ("env.db_dir", "db_id" if options.db_dir else None)]
        if not fields.answer_is_template():
            named.append(("fields.answer", fields.answer))
        for field, column in named:
            if column is not None and column not in columns:
                hint = " (the database of each row)" if field == "env.db_dir" else ""
                raise ValueError(f"{label}: {field}: no column {column!r}{hint}; its columns: "
                                 f"{', '.join(columns)}")
        return sorted({column for _, column in named if column is not None})

    def kept(self, row: dict[str, Any]) -> bool:
        for column, wanted in self.options.filter.items():
            allowed = wanted if isinstance(wanted, list) else [wanted]
            if text(row[column]) not in {text(value) for value in allowed}:
                return False
        return True

    def task(self, source: Source, index: int, row: dict[str, Any], prefix: str,
             seed: int | None = None) -> Task:
        """The row as a task: its options in the dataset's order, or shuffled by `seed`."""
        fields = self.fields
        task_id = text(row[fields.id]).strip() if fields.id else str(index)
        if not task_id:
            raise RowError("id", f"column {fields.id!r} is empty")
        task_id = prefix + task_id
        reference, aliases = self._reference(row)
        values = dict(row)
        metadata: dict[str, Any] = {"row": index, **{c: plain(row[c]) for c in self.options.metadata}}
        if fields.choices is not None:
            options, reference, order = self._choices(row, reference, task_id, seed)
            values[CHOICES] = lettered(options)
            metadata["choices"] = options
            if order is not None:
                metadata["shuffle"] = {"seed": seed, "order": order}
        if self.options.db_dir:
            database = self._database(row)
            metadata["db_path"] = str(database)
            if SCHEMA in template_names(fields.question):
                values[SCHEMA] = sqlite_schema(str(database))
        question = render("question", fields.question, values).strip()
        if not question:
            raise RowError("question", "empty")
        family = text(row[fields.family]).strip() if fields.family else source.name
        if not family:
            raise RowError("family", f"column {fields.family!r} is empty")
        if fields.aliases is not None:
            listed = row[fields.aliases]
            aliases += [text(a).strip() for a in (listed if isinstance(listed, list) else [listed])]
        answer = text(reference)
        return Task(task_id=task_id, family=family, question=question, answer=answer,
                    aliases=tuple(a for a in dict.fromkeys(aliases) if a and a != answer), metadata=metadata)

    def _reference(self, row: dict[str, Any]) -> tuple[Any, list[str]]:
        """The answer (an integer column stays an integer: the index of a choice) and, where the
        answer is a list, its other items as aliases."""
        fields = self.fields
        value = render("answer", fields.answer, row) if fields.answer_is_template() else row[fields.answer]
        others: list[str] = []
        if isinstance(value, list):
            if not value:
                raise RowError("answer", "an empty list")
            value, others = value[0], [text(v).strip() for v in value[1:]]
        check_answer(value)
        if isinstance(value, int) and not isinstance(value, bool) and not fields.answer_regex:
            return value, others
        value = text(value).strip()
        if fields.answer_regex and value:
            match = answer_search(fields.answer_regex, value)
            if match is None:
                raise RowError("answer", f"answer_regex {fields.answer_regex!r} does not match "
                                         f"{value[-60:]!r}")
            value = (match.group(1) if match.groups() else match.group(0)).strip()
        if not value:
            raise RowError("answer", "empty")
        return value, others

    def _choices(self, row: dict[str, Any], reference: Any, task_id: str,
                 seed: int | None) -> tuple[list[str], str, list[int] | None]:
        """The options, the reference's letter and, when shuffled, the original index of each option
        shown (shuffled by the seed and the task id: a task gets the same order for the same seed)."""
        column = self.fields.choices
        if isinstance(column, str):
            listed = row[column]
            if not isinstance(listed, list):
                raise RowError("choices", f"column {column!r} holds a {type(listed).__name__}, not a list")
            options = [text(option).strip() for option in listed]
        else:
            options = [text(row[c]).strip() for c in column or []]
        if not 2 <= len(options) <= len(LETTERS):
            raise RowError("choices", f"{len(options)} options; 2 to {len(LETTERS)} can be lettered")
        if "" in options:
            raise RowError("choices", f"option {LETTERS[options.index('')]} is empty")
        index = choice_index(reference, options)
        if seed is None:
            return options, LETTERS[index], None
        order = list(range(len(options)))
        random.Random(f"{seed}:{task_id}").shuffle(order)
        return [options[i] for i in order], LETTERS[order.index(index)], order

    def _database(self, row: dict[str, Any]) -> Path:
        db_id = text(row["db_id"]).strip()
        if not db_id:
            raise RowError("db_id", "empty")
        directory = Path(self.options.db_dir or "")
        for candidate in (directory / db_id / f"{db_id}.sqlite", directory / f"{db_id}.sqlite"):
            if candidate.is_file():
                return candidate
        raise RowError("db_id", f"no database {db_id!r} in {directory} (looked for {db_id}/{db_id}.sqlite "
                                f"and {db_id}.sqlite)")

