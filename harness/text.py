"""Text from outside made safe where it enters: model replies, tool output, task files, error messages.

A Python string can hold what no table or terminal should: a lone surrogate (`"\\ud800"`, valid in
JSON, unencodable in UTF-8, so pyarrow cannot write the row that holds it), and control characters
(an escape sequence recolours or rewrites the user's terminal, a NUL cuts text short in C tools).
`safe_text` replaces each lone surrogate with U+FFFD and shows every control character but tab,
newline and carriage return escaped (`\\x1b`, `\\x00`), so the text is kept, visibly, and every table,
transcript and terminal can hold it. Text that needs neither is returned as it is, unchanged and
uncopied (one regular-expression scan).
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def _replace(match: re.Match[str]) -> str:
    char = match.group()
    return REPLACEMENT if "\ud800" <= char <= "\udfff" else f"\\x{ord(char):02x}"


def safe_text(text: str) -> str:
    """`text` with lone surrogates replaced and control characters (but \\t, \\n, \\r) escaped."""
    return _UNSAFE.sub(_replace, text) if _UNSAFE.search(text) is not None else text

