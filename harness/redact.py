"""Secrets never reach an output: the values of secret environment variables are blanked out of
every row an agent run writes (transcripts, call errors, episodes, memory events, ...).

Secret means: every variable whose name says it holds a credential (`*_API_KEY`, `*TOKEN*`,
`*SECRET*`, `*PASSWORD*`, ...), plus any the user names in `output.secret_env`. Values shorter than
`MIN_SECRET_CHARS` are left alone: blanking "1" or "true" out of every transcript would destroy it
and protect nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6
SECRET_NAME = re.compile(r"(API_?KEY|_KEY$|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE)", re.IGNORECASE)


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        values = {s for s in secrets if len(s) >= MIN_SECRET_CHARS}
        # Also as they appear inside JSON text (a transcript's messages), escaped.
        values |= {json.dumps(s, ensure_ascii=False)[1:-1] for s in values}
        # Longest first, so a secret that contains another is blanked whole.
        ordered = sorted(values, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @classmethod
    def from_environment(cls, extra_names: Iterable[str] = (),
                         environ: Mapping[str, str] | None = None) -> Redactor:
        environ = os.environ if environ is None else environ
        named = set(extra_names)
        return cls(value for name, value in environ.items() if name in named or SECRET_NAME.search(name))

    def __call__(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        if self._pattern is None:
            return row
        return {key: self(value) if isinstance(value, str) else value for key, value in row.items()}


class _Sink(Protocol):
    def append(self, table: str, rows: list[dict[str, Any]]) -> None: ...


class RedactingSink:
    """A sink that blanks secrets out of every row before passing it on."""

    def __init__(self, inner: _Sink, redactor: Redactor) -> None:
        self.inner = inner
        self.redact = redactor

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.inner.append(table, [self.redact.row(row) for row in rows])
