"""Tasks from a dataset: a Hugging Face hub id, or a local file or directory of parquet, jsonl, json,
csv or arrow, read with the `datasets` library; `env.fields` says how a row becomes a task.

`fields.question` is a template over the row's columns (`{question}`, `{Correct Answer}`), where
`{choices}` lays out the options (`fields.choices`: a list column, or several columns) as lettered
lines and `{schema}` is the SQL database's tables (with `env.db_dir`); `fields.answer` is a column
or a template, narrowed by `fields.answer_regex`. Every row is checked before the run starts: a
missing column, a template naming no column, an empty split, an answer the scorer refuses or a
missing database stops it with one line naming the row and the field.

Nothing is downloaded that was not asked for: a local path is read where it is; a hub id goes through
the Hugging Face cache, and with HF_HUB_OFFLINE=1 a warm cache is read without the network.

Here the environment: its sources read, filtered, ordered and limited, each row checked. Its parts:
dataset_options.py (the options and fields, checked), dataset_reading.py (a file, a directory or a hub id
read), dataset_rows.py (a row made a task by the fields), dataset_cells.py (cells as text, templates).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from envs.base import EnvEpisode, Environment, SingleTurnEpisode, Task
from envs.dataset_cells import SCHEMA, RowError, template_names
from envs.dataset_options import validated_options
from envs.dataset_reading import read_source
from envs.dataset_rows import FieldMapping, Row, Source
from envs.scorers import scorer as make_scorer

CHECK_UP_FRONT_S = 2.0
"""Seconds the scorer checks references while the dataset is read; the rest are checked as the planner
draws their tasks, before the run starts (math-verify takes ~2 ms a reference: 200,000 took minutes)."""


class DatasetTasks(Environment):
    """Tasks from the rows of one or several datasets (see the module's docstring)."""

    name = "dataset"
    packages = ("datasets", "huggingface-hub", "pyarrow", "regex")
    order_option = "order_by"

    def __init__(self, path: str | list[str] | None = None, subset: str | None = None, split: str = "train",
                 revision: str | None = None, fields: dict[str, Any] | None = None,
                 filter: dict[str, Any] | None = None, limit: int | None = None, order_by: str | None = None,
                 shuffle_choices: bool = False, scorer: str | dict[str, Any] = "exact",
                 tuning_split: str | None = None, tuning_path: str | list[str] | None = None,
                 metadata: list[str] | None = None, db_dir: str | None = None) -> None:
        if not path:
            raise ValueError("env.path: name a Hugging Face dataset or a local file, e.g. env=dataset "
                             "env.path=openai/gsm8k env.subset=main env.split=test")
        self.options = validated_options(dict(
            path=path, subset=subset, split=split, revision=revision, fields=fields or {},
            filter=filter or {}, limit=limit, order_by=order_by, shuffle_choices=shuffle_choices,
            scorer=scorer, tuning_split=tuning_split, tuning_path=tuning_path, metadata=metadata or [],
            db_dir=db_dir))
        self.mapping = FieldMapping(self.options)
        if tuning_split and tuning_path:
            raise ValueError("env.tuning_split: set it or env.tuning_path, not both")
        if tuning_split and any(Path(p).is_file() for p in self.options.path):
            raise ValueError("env.tuning_split: a single file has no other split; name the tuning file with "
                             "env.tuning_path")
        if SCHEMA in template_names(self.options.fields.question) and not db_dir:
            raise ValueError(f"env.db_dir: fields.question names {{{SCHEMA}}}: set env.db_dir to the "
                             "directory of the SQLite databases (<db_dir>/<db_id>/<db_id>.sqlite)")
        self.scorer = make_scorer(self.options.scorer)
        self._rows: dict[str, tuple[Source, int, dict[str, Any], str]] = {}
        """Each task's row, where a task is rebuilt for another seed (shuffled options)."""
        self._unchecked: dict[str, tuple[Task, str]] = {}
        """Tasks whose reference the scorer has not checked yet (past `CHECK_UP_FRONT_S`), with where
        they come from: each is checked when the planner first asks for it (`task_for_seed`)."""
        self._tasks = self._read(self.options.path, self.options.split)
        self._tuning: list[Task] = []
        if tuning_split or tuning_path:
            paths = self.options.tuning_path or self.options.path
            self._tuning = self._read(paths, tuning_split or self.options.split, id_prefix="tuning:")

    def tasks(self) -> list[Task]:
        return self._tasks

    def tuning_tasks(self) -> list[Task]:
        return self._tuning

    def task_for_seed(self, task: Task, seed: int) -> Task:
        """With `shuffle_choices`, the options in the order this seed draws for this task (the
        reference's letter and the recorded shuffle move with them); otherwise the task as read. The
        pool itself keeps the dataset's order, so the tuning split and the stream's draw are the same
        for every seed."""
        if task.task_id in self._unchecked:
            self._check_reference(*self._unchecked.pop(task.task_id))
        if not self.options.shuffle_choices or task.task_id not in self._rows:
            return task
        return self.mapping.task(*self._rows[task.task_id], seed=seed)

    def reset(self, task: Task) -> EnvEpisode:
        return SingleTurnEpisode(task, self.scorer)

    # ----- reading -----

    def _read(self, paths: list[str], split: str, id_prefix: str = "") -> list[Task]:
        """The tasks of these sources' `split`: filtered, ordered, limited, each row checked."""
        sources = [self._source(path, split) for path in paths]
        rows = [(source, index, row) for source in sources for index, row in enumerate(source.rows)
                if self.mapping.kept(row)]
        if not rows:
            raise ValueError(f"env.filter: no row of {', '.join(s.label for s in sources)} has "
                             f"{self.options.filter}")
        if self.options.order_by:
            rows = self._ordered(rows, self.options.order_by)
        tasks: list[Task] = []
        used: dict[str, str] = {}
        checking_until = time.monotonic() + CHECK_UP_FRONT_S
        for source, index, row in rows[:self.options.limit]:
            where = f"{source.label} row {index}"
            prefix = id_prefix + (f"{source.name}:" if len(sources) > 1 else "")
            try:
                task = self.mapping.task(source, index, row, prefix)
            except RowError as error:
                raise ValueError(f"{where}: {error.field}: {error}") from None
            if task.task_id in used:
                raise ValueError(f"{where}: id: {task.task_id!r} is already used by {used[task.task_id]}")
            used[task.task_id] = where
            if time.monotonic() < checking_until:
                self._check_reference(task, where)
            else:  # a slow scorer (math, sql) on a large set: checked when the planner draws the task
                self._unchecked[id_prefix + task.task_id.removeprefix(id_prefix)] = (task, where)
            tasks.append(task)
            if self.options.shuffle_choices:
                self._rows[task.task_id] = (source, index, row, prefix)
        return tasks

    def _check_reference(self, task: Task, where: str) -> None:
        try:
            self.scorer.check_reference(task)
        except ValueError as error:
            raise ValueError(f"{where} (id {task.task_id}): answer: {error}") from None

    def _source(self, path: str, split: str) -> Source:
        label, name, data = read_source(path, self.options.subset, split, self.options.revision)
        wanted = self.mapping.check_columns(label, list(data.column_names))
        return Source(label, name, data.select_columns(wanted).to_list())

    @staticmethod
    def _ordered(rows: list[Row], column: str) -> list[Row]:
        for source, index, row in rows:
            if row[column] is None:
                raise ValueError(f"{source.label} row {index}: order_by: column {column!r} is empty")
        try:
            return sorted(rows, key=lambda item: item[2][column])
        except TypeError:
            kinds = sorted({type(row[column]).__name__ for _, _, row in rows})
            raise ValueError(f"env.order_by: column {column!r} mixes values that do not compare "
                             f"({', '.join(kinds)})") from None

