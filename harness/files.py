"""Files written whole or not at all: a reader (another process, a resumed run) never sees half.

The content goes to a hidden temporary file beside the target (same filesystem, so the rename is
atomic), which then replaces the target in one `os.replace`. The temporary name is unique per call,
so processes writing the same target at once never write into each other's file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def replace_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Let `write` fill a temporary file, then rename it over `path`. If `write` fails, `path` is
    left as it was and the temporary file is removed. Temporary names start with a dot and end in
    `.tmp`, so globs for the real files (`*.parquet`, `*.json`) never match them."""
    hidden = path.name if path.name.startswith(".") else f".{path.name}"
    temporary = path.with_name(f"{hidden}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    replace_atomically(path, lambda temporary: temporary.write_text(text))
