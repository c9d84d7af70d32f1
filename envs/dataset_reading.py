"""A dataset read with the `datasets` library: a local file, a local directory (a copy of a hub
repository) or a hub id, through the Hugging Face cache (read alone, at once, when the hub cannot be
reached); a file that cannot be read is named with its line and why."""

from __future__ import annotations

import functools
import json
import math
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}
"""The `datasets` builder that reads a local file, by its suffix."""


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

