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
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import sqlite3
import string
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envs.base import PATTERN_TIMEOUT_S, EnvEpisode, Environment, SingleTurnEpisode, Task, nonfinite_answer
from envs.scorers import scorer as make_scorer

BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}
"""The `datasets` builder that reads a local file, by its suffix."""
LETTERS = string.ascii_uppercase
CHOICES = "choices"
"""The placeholder of the lettered options in `fields.question` (with `fields.choices`)."""
SCHEMA = "schema"
"""The placeholder of the SQL database's CREATE statements (with `env.db_dir`)."""
CHECK_UP_FRONT_S = 2.0
"""Seconds the scorer checks references while the dataset is read; the rest are checked as the planner
draws their tasks, before the run starts (math-verify takes ~2 ms a reference: 200,000 took minutes)."""


def template_names(template: str) -> set[str]:
    """The columns a `{column}` template names (`{options[0]}` names `options`)."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        name = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not name or name.isdigit():
            raise ValueError(f"{{{field}}} names no column; write {{column}}")
        names.add(name)
    return names


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


class RowError(ValueError):
    """What is wrong with one row, and in which field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def text(value: Any) -> str:
    """A cell as text: a list one item per line; a table (a mapping of equal-length lists, as
    HotpotQA's `context`) one row per line, its cells joined by ': '."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        columns = list(value.values())
        if columns and all(isinstance(c, list) for c in columns) and len({len(c) for c in columns}) == 1:
            return "\n".join(": ".join(_inline(c[i]) for c in columns) for i in range(len(columns[0])))
        return "\n".join(f"{key}: {_inline(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return "\n".join(_inline(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _inline(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_inline(item).strip() for item in value)
    return text(value)


class _Template(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return text(value) if not format_spec else super().format_field(value, format_spec)


def render(field: str, template: str, values: Mapping[str, Any]) -> str:
    try:
        return _Template().vformat(template, (), values)
    except (KeyError, IndexError, AttributeError, TypeError, ValueError) as error:
        raise RowError(field, f"the template cannot be filled ({type(error).__name__}: {error})") from None


def lettered(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}) {option}" for i, option in enumerate(options))


def choice_index(reference: Any, options: list[str]) -> int:
    """Which option the reference names: an index (an integer column), a letter, or an option's text."""
    if isinstance(reference, int) and not isinstance(reference, bool):
        if 0 <= reference < len(options):
            return reference
        raise RowError("answer", f"index {reference} is not one of the {len(options)} options")
    letter = re.fullmatch(r"\(?([A-Z])\)?", reference)
    if letter and LETTERS.index(letter.group(1)) < len(options):
        return LETTERS.index(letter.group(1))
    matches = [i for i, option in enumerate(options) if option == reference]
    if len(matches) > 1:
        raise RowError("answer", f"{reference[:60]!r} is the text of options "
                                 f"{', '.join(LETTERS[i] for i in matches)}")
    if not matches:
        raise RowError("answer", f"{reference[:60]!r} is neither a letter A-{LETTERS[len(options) - 1]} "
                                 "nor the text of an option")
    return matches[0]


@functools.lru_cache(maxsize=64)
def sqlite_schema(path: str) -> str:
    """The CREATE statements of a SQLite database's tables, read without writing to it."""
    try:
        connection = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)
        try:
            rows = connection.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT "
                                      "NULL ORDER BY rowid").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise RowError("db_id", f"{path}: not a readable SQLite database ({error})") from None
    return "\n\n".join(f"{sql.strip()};" for (sql,) in rows)


_READING = threading.Lock()
"""One dataset read at a time in a process: a sweep plans its jobs in threads, and datasets' tqdm
lock breaks when two threads read at once (huggingface/datasets#7660: a job failed with "type object
'tqdm' has no attribute '_lock'")."""


DATA_FORMATS = {**BUILDERS, ".tsv": "csv", ".txt": "text"}
"""What `datasets` reads a file of a local directory as, by its suffix (a directory is read as a copy
of a hub repository: one format, its files split by their names)."""
METADATA_FILES = {"dataset_infos.json", "dataset_info.json", "dataset_dict.json", "state.json"}
"""JSON files of a hub repository or a saved dataset that describe it and hold no rows."""


def data_files(directory: Path) -> dict[str, list[Path]]:
    """The data files of a local directory by the format `datasets` reads them as (hidden files and
    folders, and metadata files, left out as the library leaves them)."""
    found: dict[str, list[Path]] = {}
    for file in sorted(directory.rglob("*")):
        relative = file.relative_to(directory)
        if (file.is_file() and file.suffix in DATA_FORMATS and file.name not in METADATA_FILES
                and not any(part.startswith((".", "_")) for part in relative.parts)):
            found.setdefault(DATA_FORMATS[file.suffix], []).append(file)
    return found


def _one_format(directory: Path, label: str) -> list[Path]:
    """The data files of `directory`, all of one format; a directory that mixes formats is refused:
    `datasets` would read the files of one format only and say nothing of the others."""
    found = data_files(directory)
    if len(found) > 1:
        listed = "; ".join(f"{fmt}: {', '.join(str(f.relative_to(directory)) for f in files[:3])}"
                           f"{' ...' if len(files) > 3 else ''}" for fmt, files in found.items())
        raise ValueError(f"env.path: {label}: the directory mixes data formats ({listed}); `datasets` "
                         "reads one format of a directory: keep one there, or list the files in env.path")
    return [file for files in found.values() for file in files]


def _utf8(file: Path, shown: str) -> None:
    """Refuse a text file that is not UTF-8, naming its line (pyarrow would keep the bytes, and reading
    the row would fail later with no file named)."""
    data = file.read_bytes()
    try:
        data.decode("utf-8")
        return
    except UnicodeDecodeError as error:
        start = error.start
    number = data.count(b"\n", 0, start) + 1
    line_start = data.rfind(b"\n", 0, start) + 1
    column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
    raise ValueError(f"env.path: {shown} line {number}: not UTF-8 text (byte {data[start]:#04x} at column "
                     f"{column}); save the file as UTF-8")


def _bad_json_line(file: Path) -> tuple[int, str] | None:
    """The first line of a JSON Lines file that cannot be read (not JSON, a number past a float's
    range): its number and why."""
    with file.open(encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    json.loads(line, parse_float=_finite)
                except json.JSONDecodeError as error:
                    return number, f"not valid JSON ({error.msg})"
                except ValueError as error:
                    return number, str(error)
    return None


def _finite(number: str) -> float:
    if not math.isfinite(value := float(number)):
        raise ValueError(f"{number} is past what a number may hold, 1.8e308")
    return value


def _why_unreadable(file: Path, shown: str) -> str | None:
    """What is wrong with a local file `datasets` failed to read, found cheaply: a line that is not
    JSON, a file that holds no rows; None where nothing is found."""
    suffix = file.suffix
    if suffix == ".parquet":
        import pyarrow.parquet

        try:
            rows = pyarrow.parquet.ParquetFile(file).metadata.num_rows
        except Exception as error:  # not parquet at all
            return f"{shown}: not a readable parquet file ({' '.join(str(error).split())})"
        return f"{shown}: holds no rows" if rows == 0 else None
    if suffix not in (".jsonl", ".json", ".csv", ".tsv", ".txt"):
        return None
    text = file.read_text(encoding="utf-8-sig")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return f"{shown}: holds no rows (the file is empty)"
    if suffix in (".csv", ".tsv") and len(lines) == 1:
        return f"{shown}: holds no rows (only a header line)"
    if suffix == ".json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            bad = _bad_json_line(file)  # JSON Lines under a .json name, as `datasets` reads it too
            if bad is None or bad[0] == 1:
                return f"{shown} line {error.lineno}: not valid JSON ({error.msg})"
            return f"{shown} line {bad[0]}: {bad[1]}"
        if not document:
            return f"{shown}: holds no rows"
        return None
    if suffix == ".jsonl":
        bad = _bad_json_line(file)
        if bad is not None:
            return f"{shown} line {bad[0]}: {bad[1]}"
    return None


def read_source(path: str, subset: str | None, split: str, revision: str | None) -> tuple[str, str, Any]:
    """Its label, its short name and the `datasets.Dataset` at `path`: a local file (subset, split
    and revision unused), a local directory (a copy of a hub repository) or a hub id."""
    import datasets  # seconds to import: only where a dataset is read

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # a failure is this module's one line
    local = Path(path)
    unreachable: str | None = None
    files: dict[Path, str] = {}
    """The local files read, each with its name as messages show it."""
    if local.exists():  # reading a local file otherwise pings the hub's download counter
        datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
    if local.is_file():
        label, name = local.name, local.name.removesuffix(local.suffix)
        if local.suffix not in BUILDERS:
            raise ValueError(f"env.path: {label}: not a {', '.join(sorted(set(BUILDERS)))} file")
        if local.stat().st_size == 0:
            raise ValueError(f"env.path: {label}: no rows (the file is empty)")
        files[local] = label
        load = functools.partial(datasets.load_dataset, BUILDERS[local.suffix], data_files=str(local),
                                 split="train")
    elif local.is_dir():
        label, name = f"{local.name}[{split}]", local.name
        files.update((file, f"{local.name}/{file.relative_to(local)}") for file in _one_format(local, label))
        load = functools.partial(datasets.load_dataset, str(local), subset, split=split)
    elif local.is_absolute() or local.suffix in BUILDERS:
        raise ValueError(f"env.path: {path}: no such file or directory")
    else:
        label, name = f"{path}[{split}]", path.rsplit("/", 1)[-1]
        load = functools.partial(datasets.load_dataset, path, subset, split=split, revision=revision)
        unreachable = None if datasets.config.HF_HUB_OFFLINE else hub_unreachable()
        if unreachable is not None:  # the cache alone, at once, not the library's retries (25 s and more)
            load = functools.partial(_offline, load)
    for file, shown in files.items():
        if file.suffix in (".jsonl", ".json", ".csv", ".tsv", ".txt"):
            _utf8(file, shown)
    try:
        with _READING:
            data = load()
    except Exception as error:  # the library's own words, on one line, unless the file says more
        found = next((why for file, shown in files.items() if (why := _why_unreadable(file, shown))), None)
        if found is not None:
            raise ValueError(f"env.path: {found}") from None
        hint = (" (HF_HUB_OFFLINE is set: only a dataset already in the Hugging Face cache can be read)"
                if datasets.config.HF_HUB_OFFLINE and not local.exists() else "")
        if unreachable is not None:  # set only for a hub id
            hint = (f" (the hub cannot be reached, {unreachable}: only a dataset already in the Hugging Face "
                    "cache can be read)")
        message = " ".join(str(error).split()) or type(error).__name__
        tried = "" if local.exists() else f"no local file or directory {path!r}; as a Hugging Face hub id: "
        raise ValueError(f"env.path: {label}: {tried}{message}{hint}") from None
    if len(data) == 0:
        raise ValueError(f"env.path: {label}: holds no rows")
    return label, name, data


HUB_PROBE_S = 3.0
"""How long the hub may take to answer before a hub id is read from the Hugging Face cache alone."""


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached (one HEAD request, through the proxy the environment
    names, if any), or None when it answers at all."""
    from huggingface_hub import constants

    request = urllib.request.Request(constants.ENDPOINT, method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=HUB_PROBE_S).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return f"{constants.ENDPOINT}: {' '.join(str(reason).split()) or type(reason).__name__}"
    return None


def _offline(load: Callable[[], Any]) -> Any:
    """`load()` as with HF_HUB_OFFLINE=1: a dataset already in the cache is read, else it fails at once."""
    import datasets
    from huggingface_hub import constants

    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        return load()
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


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
        self.options = _validated(dict(
            path=path, subset=subset, split=split, revision=revision, fields=fields or {},
            filter=filter or {}, limit=limit, order_by=order_by, shuffle_choices=shuffle_choices,
            scorer=scorer, tuning_split=tuning_split, tuning_path=tuning_path, metadata=metadata or [],
            db_dir=db_dir))
        self.fields = self.options.fields
        if tuning_split and tuning_path:
            raise ValueError("env.tuning_split: set it or env.tuning_path, not both")
        if tuning_split and any(Path(p).is_file() for p in self.options.path):
            raise ValueError("env.tuning_split: a single file has no other split; name the tuning file with "
                             "env.tuning_path")
        if SCHEMA in template_names(self.fields.question) and not db_dir:
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
        return self._task(*self._rows[task.task_id], seed=seed)

    def reset(self, task: Task) -> EnvEpisode:
        return SingleTurnEpisode(task, self.scorer)

    # ----- reading -----

    def _read(self, paths: list[str], split: str, id_prefix: str = "") -> list[Task]:
        """The tasks of these sources' `split`: filtered, ordered, limited, each row checked."""
        sources = [self._source(path, split) for path in paths]
        rows = [(source, index, row) for source in sources for index, row in enumerate(source.rows)
                if self._kept(row)]
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
                task = self._task(source, index, row, prefix)
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
        wanted = self._check_columns(label, list(data.column_names))
        return Source(label, name, data.select_columns(wanted).to_list())

    def _check_columns(self, label: str, columns: list[str]) -> list[str]:
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

    def _kept(self, row: dict[str, Any]) -> bool:
        for column, wanted in self.options.filter.items():
            allowed = wanted if isinstance(wanted, list) else [wanted]
            if text(row[column]) not in {text(value) for value in allowed}:
                return False
        return True

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

    # ----- one row -----

    def _task(self, source: Source, index: int, row: dict[str, Any], prefix: str,
              seed: int | None = None) -> Task:
        """The row as a task: its options in the dataset's order, or shuffled by `seed`."""
        fields = self.fields
        task_id = text(row[fields.id]).strip() if fields.id else str(index)
        if not task_id:
            raise RowError("id", f"column {fields.id!r} is empty")
        task_id = prefix + task_id
        reference, aliases = self._reference(row)
        values = dict(row)
        metadata: dict[str, Any] = {"row": index, **{c: _plain(row[c]) for c in self.options.metadata}}
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
        _an_answer(value)
        if isinstance(value, int) and not isinstance(value, bool) and not fields.answer_regex:
            return value, others
        value = text(value).strip()
        if fields.answer_regex and value:
            match = _search(fields.answer_regex, value)
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


def _an_answer(value: Any) -> None:
    """Refuse a reference that is no answer a reply could give: a mapping or a list (its text would be
    "v: 2" or lines), a number that is not finite (NaN, Infinity, 1e309 read as inf: its text would be
    "nan" or "inf", which the file did not say). A column whose answer is that text holds it as text."""
    if isinstance(value, Mapping | list | tuple):
        kind = "a mapping" if isinstance(value, Mapping) else "a list"
        raise RowError("answer", f"{kind} ({repr(value)[:60]}), not an answer; take one part of it "
                                 "with a template, e.g. fields.answer='{column[key]}'")
    if (why := nonfinite_answer(value)) is not None:
        raise RowError("answer", why)


def _search(pattern: str, value: str) -> Any:
    """`fields.answer_regex` searched in a reference, for at most `PATTERN_TIMEOUT_S` (Python's `re`
    has no bound: a pattern such as `(x+x+)+y` backtracks for minutes on one answer)."""
    try:
        return regex.search(pattern, value, regex.MULTILINE, timeout=PATTERN_TIMEOUT_S)
    except TimeoutError:
        raise RowError("answer", f"answer_regex {pattern!r} took over {PATTERN_TIMEOUT_S:g} s on "
                                 f"{value[-60:]!r} (it backtracks without end: simplify it)") from None


def _plain(value: Any) -> Any:
    """A cell as metadata keeps it: JSON's types as they are, anything else (a date) as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _validated(values: dict[str, Any]) -> DatasetOptions:
    try:
        return DatasetOptions.model_validate(values)
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"env.{field}: {problem['msg'].removeprefix('Value error, ')}") from None
