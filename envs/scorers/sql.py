"""`sql`: execution accuracy, as text-to-SQL benchmarks score it: the reply's query and the reference
query are run on the task's SQLite database (`task.metadata["db_path"]`, absolute or relative to the
working directory) and their results compared; how the query is written does not matter.

The reply's query is the last ```sql (or ```sqlite) fenced block, else the last fenced block of any
kind, else the whole reply; one statement (a trailing ";" is fine). It runs read-only: the database
is opened with SQLite's `mode=ro`, an authorizer allows nothing but reading (no ATTACH, PRAGMA or
writes), a progress handler stops it after `timeout` seconds or once its temporary results (a sort,
DISTINCT, GROUP BY: kept in memory, never in files on disk) have grown this process by `max_memory_mb`,
and at most `max_rows` rows are read.
A query that fails (syntax error, unknown column, a write, too slow, too many rows) is a failed
verdict with SQLite's message, never an exception.

Comparing results, the papers differ and the options choose:
    BIRD (Li et al., 2023; its evaluation.py): `set(predicted) == set(gold)`, rows as tuples, so
        column order matters, duplicates and row order do not. Here: `rows: set, order: ignore`.
    Spider's test-suite accuracy (Zhong et al., 2020, the official Spider evaluation since): rows as
        multisets, row order compared only when the gold query has ORDER BY, and the columns may
        come in another order. Here: `columns: any` with the defaults.
    The defaults, `rows: multiset, order: reference, columns: ordered`: duplicates count (a missing
        DISTINCT is an error), row order counts only where the reference query has a top-level
        ORDER BY (one inside a subquery or a window does not), and columns are compared in order,
        as both BIRD and Spider's exact-set match do.
Values compare as Python does (1 == 1.0, as in both papers); floats are not rounded.

Options:
    rows: "multiset" (default) or "set" (duplicates ignored; row order then always ignored).
    order: "reference" (default: ordered when the reference has a top-level ORDER BY) or "ignore".
    columns: "ordered" (default) or "any" (some permutation of the reply's columns must match).
    timeout: seconds each query may run (default 30, BIRD's evaluation timeout).
    max_rows: rows read from a result at most (default 10000); a reference returning more is
        refused before the run, a reply returning more fails.
    max_memory_mb: how much a query may grow this process, its temporary results in memory (default
        1024). Measured as the process's resident memory, so queries scored at the same time in one
        worker count against each other's growth.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from envs.base import Task
from envs.scorers import Scorer, Verdict

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_PERMUTATIONS_TRIED = 1000
"""Column permutations tried at most (columns: any), after pruning by each column's values."""
_CACHED_REFERENCES = 256
_SHOWN = 500


class QueryError(Exception):
    """A query could not run or its result could not be read (one line, for a verdict's reason)."""


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def extract_sql(reply: str) -> str:
    """The query in a reply: the last ```sql block, else the last fenced block, else the reply."""
    blocks = _FENCE.findall(reply)
    tagged = [body for tag, body in blocks if tag.lower() in ("sql", "sqlite")]
    chosen = tagged or [body for _, body in blocks]
    return (chosen[-1] if chosen else reply).strip()


def has_top_level_order_by(sql: str) -> bool:
    """Whether ORDER BY applies to the whole result: outside parentheses, strings and comments."""
    kept, depth, index = [], 0, 0
    while index < len(sql):
        char = sql[index]
        if sql.startswith("--", index):
            end = sql.find("\n", index)
            index = len(sql) if end < 0 else end
            kept.append(" ")
            continue
        if sql.startswith("/*", index):
            end = sql.find("*/", index + 2)
            index = len(sql) if end < 0 else end + 2
            kept.append(" ")
            continue
        if char in "'\"`[":
            closing = "]" if char == "[" else char
            end = sql.find(closing, index + 1)
            index = len(sql) if end < 0 else end + 1
            kept.append(" ")
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        kept.append(char if depth == 0 and char != ")" else " ")
        index += 1
    return re.search(r"\border\s+by\b", "".join(kept), re.IGNORECASE) is not None


class _MemoryBound:
    """Whether this process has grown by more than `megabytes` since the query began."""

    def __init__(self, megabytes: float) -> None:
        self._process = psutil.Process()
        self._limit = self._process.memory_info().rss + megabytes * 2**20
        self.reached = False

    def passed(self) -> bool:
        self.reached = self.reached or self._process.memory_info().rss > self._limit
        return self.reached


def _read_only(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


class Sql(Scorer):
    name = "sql"
    blocking = True  # a query may run up to its timeout

    def __init__(self, rows: str = "multiset", order: str = "reference", columns: str = "ordered",
                 timeout: float = 30.0, max_rows: int = 10_000, max_memory_mb: float = 1024) -> None:
        for option, value, allowed in (("rows", rows, ("multiset", "set")),
                                       ("order", order, ("reference", "ignore")),
                                       ("columns", columns, ("ordered", "any"))):
            if value not in allowed:
                raise ValueError(f"scorer sql: {option} must be one of {', '.join(allowed)}, got {value!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"scorer sql: timeout must be a number of seconds > 0, got {timeout!r}")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"scorer sql: max_rows must be an integer >= 1, got {max_rows!r}")
        if isinstance(max_memory_mb, bool) or not isinstance(max_memory_mb, int | float) \
                or not max_memory_mb > 0:
            raise ValueError(f"scorer sql: max_memory_mb must be a number of megabytes > 0, "
                             f"got {max_memory_mb!r}")
        self.rows, self.order, self.columns = rows, order, columns
        self.timeout, self.max_rows, self.max_memory_mb = float(timeout), max_rows, float(max_memory_mb)
        # The reference's rows, by (database, query): each attempt at a task reruns only the reply.
        self._references: OrderedDict[tuple[str, str], list[tuple[Any, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A lock does not pickle (Ray ships environments to its workers); the cache need not travel.
        return {key: value for key, value in self.__dict__.items() if key not in ("_lock", "_references")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._references, self._lock = OrderedDict(), threading.Lock()

    def run(self, database: Path, sql: str) -> list[tuple[Any, ...]]:
        """The rows of `sql` on `database`, read-only and bounded; QueryError (one line) otherwise."""
        uri = f"file:{urllib.parse.quote(str(database.resolve()))}?mode=ro"
        try:
            connection = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as error:
            raise QueryError(f"cannot open the database ({_one_line(error)})") from None
        deadline = time.monotonic() + self.timeout
        bound = _MemoryBound(self.max_memory_mb)
        try:
            # Sorts and the like spill to temporary files by default (gigabytes of them from one ORDER
            # BY over a large join): in memory they are bounded by the progress handler below.
            connection.execute("PRAGMA temp_store = MEMORY")
            connection.set_authorizer(_read_only)
            # A non-zero return interrupts the query: the only way to stop SQLite from Python.
            connection.set_progress_handler(lambda: int(time.monotonic() > deadline or bound.passed()),
                                            10_000)
            connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000_000)  # randomblob(1e9) and the like
            connection.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1_000_000)
            rows = connection.execute(sql).fetchmany(self.max_rows + 1)
        except (sqlite3.OperationalError, MemoryError) as error:
            if bound.reached:
                raise QueryError(f"its temporary results passed max_memory_mb={self.max_memory_mb:g}") \
                    from None
            if time.monotonic() > deadline:
                raise QueryError(f"timed out after {self.timeout:g} s") from None
            raise QueryError(f"SQL error: {_one_line(error)}") from None
        except Exception as error:  # ProgrammingError, a null character, unencodable text, ...
            if str(error) == "not authorized":  # the authorizer's refusal: say what it refuses
                raise QueryError("SQL error: not authorized (replies may only read the database)") from None
            raise QueryError(f"SQL error: {_one_line(error) or type(error).__name__}") from None
        finally:
            connection.close()
        if len(rows) > self.max_rows:
            raise QueryError(f"more than {self.max_rows} rows")
        return rows

    def _database(self, task: Task) -> Path:
        path = task.metadata.get("db_path")
        if not isinstance(path, str) or not path:
            raise ValueError(f"task {task.task_id}: metadata has no db_path (the SQLite database to run on)")
        database = Path(path)
        if not database.is_file():
            raise ValueError(f"task {task.task_id}: database {path} not found")
        return database

    def _reference_rows(self, task: Task) -> list[tuple[Any, ...]]:
        database = self._database(task)
        key = (str(database.resolve()), task.answer)
        with self._lock:
            if key in self._references:
                self._references.move_to_end(key)
                return self._references[key]
        try:
            rows = self.run(database, task.answer)
        except QueryError as error:
            raise ValueError(f"task {task.task_id}: the reference query fails on {database.name}: {error}") \
                from None
        with self._lock:
            self._references[key] = rows
            while len(self._references) > _CACHED_REFERENCES:
                self._references.popitem(last=False)
        return rows

    def check_reference(self, task: Task) -> None:
        self._reference_rows(task)

    def _rows_equal(self, got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]],
                    ordered: bool) -> bool:
        if self.rows == "set":
            return set(got) == set(want)
        if ordered:
            return list(got) == list(want)
        return Counter(got) == Counter(want)

    def _equal(self, got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], ordered: bool) -> bool:
        if self._rows_equal(got, want, ordered):
            return True
        if self.columns == "ordered" or not got or not want or len(got[0]) != len(want[0]):
            return False
        # Spider's test-suite: try the permutations of the reply's columns whose values could match,
        # column by column (same multiset of values, or same set with rows: set).
        width = len(want[0])
        summary = (lambda values: set(values)) if self.rows == "set" else Counter
        got_columns = [summary(row[i] for row in got) for i in range(width)]
        want_columns = [summary(row[j] for row in want) for j in range(width)]
        candidates = [[i for i in range(width) if got_columns[i] == want_columns[j]] for j in range(width)]
        tried = 0

        def search(chosen: list[int]) -> bool:
            nonlocal tried
            if len(chosen) == width:
                tried += 1
                return self._rows_equal([tuple(row[i] for i in chosen) for row in got], want, ordered)
            return any(search([*chosen, i]) for i in candidates[len(chosen)]
                       if i not in chosen and tried < _PERMUTATIONS_TRIED)

        return search([])

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            want = self._reference_rows(task)
        except ValueError as error:  # refused by check_reference before any run; a score never raises
            return Verdict(score=0.0, success=False, response=None, reason=_one_line(error))
        try:
            sql = extract_sql(reply)
        except Exception as error:  # not text
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        if not sql:
            return Verdict(score=0.0, success=False, response=None, reason="no SQL in the reply")
        shown = _one_line(sql, _SHOWN)
        try:
            got = self.run(self._database(task), sql)
        except (QueryError, ValueError) as error:
            return Verdict(score=0.0, success=False, response=shown, reason=_one_line(error))
        ordered = self.order == "reference" and has_top_level_order_by(task.answer)
        try:
            equal = self._equal(got, want, ordered)
        except Exception as error:  # values that do not compare: never raise on a reply
            return Verdict(score=0.0, success=False, response=shown,
                           reason=f"result not comparable ({type(error).__name__})")
        if equal:
            return Verdict(score=1.0, success=True, response=shown, reason="same result as the reference")
        if ordered and self._rows_equal(got, want, ordered=False):
            return Verdict(score=0.0, success=False, response=shown,
                           reason="same rows in another order; the reference has ORDER BY")
        if len(got) != len(want) and self.rows == "multiset":
            return Verdict(score=0.0, success=False, response=shown,
                           reason=f"{len(got)} rows; the reference has {len(want)}")
        return Verdict(score=0.0, success=False, response=shown, reason="different result from the reference")
