"""A dataset row's cells as a task shows them: a cell as text, a `{column}` template filled, options
lettered and the reference's option found, a SQL database's schema, and a reference checked; what is
wrong with one row is a `RowError` naming its field."""

from __future__ import annotations

import functools
import re
import sqlite3
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import regex

from envs.base import PATTERN_TIMEOUT_S, nonfinite_answer

LETTERS = string.ascii_uppercase
CHOICES = "choices"
"""The placeholder of the lettered options in `fields.question` (with `fields.choices`)."""
SCHEMA = "schema"
"""The placeholder of the SQL database's CREATE statements (with `env.db_dir`)."""


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


def check_answer(value: Any) -> None:
    """Refuse a reference that is no answer a reply could give: a mapping or a list (its text would be
    "v: 2" or lines), a number that is not finite (NaN, Infinity, 1e309 read as inf: its text would be
    "nan" or "inf", which the file did not say). A column whose answer is that text holds it as text."""
    if isinstance(value, Mapping | list | tuple):
        kind = "a mapping" if isinstance(value, Mapping) else "a list"
        raise RowError("answer", f"{kind} ({repr(value)[:60]}), not an answer; take one part of it "
                                 "with a template, e.g. fields.answer='{column[key]}'")
    if (why := nonfinite_answer(value)) is not None:
        raise RowError("answer", why)


def answer_search(pattern: str, value: str) -> Any:
    """`fields.answer_regex` searched in a reference, for at most `PATTERN_TIMEOUT_S` (Python's `re`
    has no bound: a pattern such as `(x+x+)+y` backtracks for minutes on one answer)."""
    try:
        return regex.search(pattern, value, regex.MULTILINE, timeout=PATTERN_TIMEOUT_S)
    except TimeoutError:
        raise RowError("answer", f"answer_regex {pattern!r} took over {PATTERN_TIMEOUT_S:g} s on "
                                 f"{value[-60:]!r} (it backtracks without end: simplify it)") from None


def plain(value: Any) -> Any:
    """A cell as metadata keeps it: JSON's types as they are, anything else (a date) as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)

