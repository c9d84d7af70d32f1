"""Each package's face is code: its `__init__` says in `__all__` what a user or an agent may import from
it (inspect_ai's pattern: a public `__init__` over modules that are its own business), and its
docstring names only modules that exist.

- Every package of the code (a directory with an `__init__.py` under harness/, agents/, envs/,
  hydra_plugins/) has `__all__`: distinct strings.
- Each of them is a module or subpackage of the package, or a name the package holds once imported;
  where the package resolves names lazily (a module `__getattr__`: harness.training, so that importing
  it does not import torch), a name that one of its modules defines at the top, read from the source
  without importing it.
- What is used from outside a package is on its face: a module that another package's code imports,
  that an example or a docs page's code block imports, or that a config's `_target_` names, is in its
  package's `__all__` (and its package in the one above, up to the first package that holds the user);
  a name imported from a package itself (`from envs.scorers import Scorer`) is in that package's.
  Tests may reach behind a face; a docs page may import a module that the page itself writes.
- A package's docstring names in backticks only what exists: a word (`plan`, `session.start_pool`) is
  a module of the package, a name of its `__all__` or a name one of its modules defines at the top, or
  a dotted name whose first part is an importable module (`harness.agent_api`, `os.environ`); `x.py`
  and `dir/x.py`, in backticks or not, are files of the package or of the checkout. Anything else a
  docstring puts in backticks that is a plain word must be one of those: write other words (a command's
  argument, an extra, a column) without backticks or inside a longer span (`python -m harness.bench
  sweep`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "agents", "envs", "hydra_plugins")
"""The code's top-level directories (hydra_plugins is a namespace package: Hydra needs it so)."""

BACKTICKED = re.compile(r"`([^`\n]+)`")
WORD = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*\w+\.py)\b")
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOC_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([^#\n]+)|import\s+([\w.]+))", re.MULTILINE)
TARGET = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.MULTILINE)


# ----- the packages, read from their files -----

def children(directory: Path) -> set[str]:
    """The modules and subpackages of a package directory."""
    return ({p.stem for p in directory.glob("*.py") if p.stem != "__init__"}
            | {p.name for p in directory.iterdir() if (p / "__init__.py").is_file()})


@functools.cache
def top_names(path: Path) -> frozenset[str]:
    """The names a module defines at the top (functions, classes, assignments), without importing it."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return frozenset(names)


def defined_in(directory: Path) -> set[str]:
    """What the modules of a package directory define at the top, its `__init__` among them."""
    return set().union(*(top_names(path) for path in directory.glob("*.py")))


@dataclass(frozen=True)
class Code:
    """The packages under `root`'s top-level directories `tops`."""

    root: Path = ROOT
    tops: tuple[str, ...] = PACKAGES

    @functools.cached_property
    def packages(self) -> dict[str, Path]:
        """Every package by its dotted name, to its directory."""
        return {".".join(init.parent.relative_to(self.root).parts): init.parent
                for top in self.tops for init in sorted((self.root / top).rglob("__init__.py"))}

    def face(self, package: str) -> tuple[str, ...]:
        """The package's `__all__`: read from its `__init__`, or (`sorted(_HOMES)`) from it imported."""
        return self._faces.setdefault(package, self._read_face(package))

    @functools.cached_property
    def _faces(self) -> dict[str, tuple[str, ...]]:
        return {}

    def _read_face(self, package: str) -> tuple[str, ...]:
        for node in ast.parse((self.packages[package] / "__init__.py").read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                try:
                    return tuple(ast.literal_eval(node.value))
                except ValueError:
                    return tuple(importlib.import_module(package).__all__)
        return ()

    def docstring(self, package: str) -> str:
        return ast.get_docstring(ast.parse((self.packages[package] / "__init__.py").read_text())) or ""

    def module_path(self, dotted: str) -> Path | None:
        """The file or package directory of a dotted module name of the code; None if there is none."""
        if not dotted or dotted.split(".")[0] not in self.tops:
            return None
        base = self.root.joinpath(*dotted.split("."))
        if (base / "__init__.py").is_file():
            return base
        return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


CODE = Code()


# ----- what is used from outside a package -----

@dataclass(frozen=True)
class Use:
    where: str
    """path:line of the import or the `_target_`."""
    user: str
    """The importing module's dotted name; "" for an example, a config or a docs page (outside all)."""
    module: str
    """The dotted name it imports from (`envs.scorers`) or names (`harness.driver.callbacks`)."""
    names: tuple[str, ...] = ()
    """The names of `from module import a, b`."""


def code_uses() -> Iterator[Use]:
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            user = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield from file_uses(path, user)
    for path in sorted((ROOT / "examples").rglob("*.py")):
        yield from file_uses(path, "")


def file_uses(path: Path, user: str) -> Iterator[Use]:
    where = str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Use(f"{where}:{node.lineno}", user, alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield Use(f"{where}:{node.lineno}", user, node.module, tuple(a.name for a in node.names))


def outside_uses() -> Iterator[Use]:
    """What the configs' `_target_`s and the docs' code blocks use: from outside every package."""
    for path in sorted([*(ROOT / "conf").rglob("*.yaml"), *(ROOT / "examples").rglob("*.yaml")]):
        text = path.read_text()
        for match in TARGET.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield Use(f"{path.relative_to(ROOT)}:{line}", "", match.group(1).rpartition(".")[0])
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for block in FENCE.finditer(text):
            for match in DOC_IMPORT.finditer(block.group(1)):
                line = text.count("\n", 0, block.start(1) + match.start()) + 1
                where = f"{page.relative_to(ROOT)}:{line}"
                if match.group(3):
                    yield Use(where, "", match.group(3))
                else:
                    names = (n.split(" as ")[0].strip(" ()") for n in match.group(2).split(","))
                    yield Use(where, "", match.group(1), tuple(n for n in names if n))


def within(user: str, package: str) -> bool:
    return user == package or user.startswith(package + ".")


def behind_the_face(use: Use, code: Code = CODE) -> list[str]:
    """Each step of a use that its package's `__all__` leaves out, one line each."""
    if code.module_path(use.module) is None:
        return []  # not the code's, or a module a docs page writes itself
    missing = []
    parts = use.module.split(".")
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        if package in code.packages and not within(use.user, package) and parts[depth] not in code.face(
                package):
            missing.append(f"{use.where}: {parts[depth]} (used as {use.module}) is not in {package}.__all__")
    if use.module in code.packages and not within(use.user, use.module):
        missing += [f"{use.where}: {name} (from {use.module}) is not in {use.module}.__all__"
                    for name in use.names if name not in code.face(use.module)]
    return missing


# ----- what a docstring names -----

def named_in(package: str, code: Code = CODE) -> list[str]:
    """What the package's docstring names in backticks, or as a file, that is not there, one line each."""
    text, directory = code.docstring(package), code.packages[package]
    modules, defined = children(directory), defined_in(directory) | set(code.face(package))
    missing = []
    for span in BACKTICKED.findall(text):
        word = re.sub(r"\(.*\)$", "", span.strip())
        if WORD.fullmatch(word) and not names_something(word, directory, modules, defined, code):
            missing.append(f"`{span}`")
    for file in FILE.findall(text):
        if not any((base / file).is_file() for base in (directory, code.root, code.root / "harness")):
            missing.append(file)
    return missing


def names_something(word: str, directory: Path, modules: set[str], defined: set[str], code: Code) -> bool:
    first, *rest = word.split(".")
    if first in modules:
        inner = directory / first
        return not rest or rest[0] in (children(inner) | defined_in(inner) if inner.is_dir()
                                       else top_names(inner.with_suffix(".py")))
    if first in defined:
        return True
    if first in code.tops:
        return not rest or code.module_path(f"{first}.{rest[0]}") is not None
    if not rest:
        return False  # a plain word that is neither a module of the package nor a name of it
    try:
        return importlib.util.find_spec(first) is not None
    except (ImportError, ValueError):
        return False


# ----- the rules -----

PACKAGE_NAMES = sorted(CODE.packages)


def test_the_packages_are_found():
    assert {"harness", "harness.training", "agents", "envs", "envs.scorers",
            "hydra_plugins.harness_ray_launcher"} <= set(PACKAGE_NAMES)


@pytest.mark.parametrize("package", PACKAGE_NAMES)
def test_every_package_has_a_face_of_names_that_are_there(package):
    names = CODE.face(package)
    assert names, f"{package}/__init__.py: say in __all__ what may be imported from it"
    assert all(isinstance(name, str) for name in names) and len(set(names)) == len(names), names
    module = importlib.import_module(package)
    directory = CODE.packages[package]
    lazy = "__getattr__" in vars(module)
    missing = [name for name in names if name not in children(directory) and name not in vars(module)
               and not (lazy and name in defined_in(directory))]
    assert not missing, f"{package}.__all__ names what it does not hold: {missing}"


def test_what_other_packages_use_is_on_their_faces():
    missing = [line for use in [*code_uses(), *outside_uses()] for line in behind_the_face(use)]
    assert not missing, "add it to the package's __all__ (or use what is):\n" + "\n".join(missing)


@pytest.mark.parametrize("package", PACKAGE_NAMES)
def test_a_packages_docstring_names_only_what_exists(package):
    assert CODE.docstring(package), f"{package}/__init__.py: say what it is"
    missing = named_in(package)
    assert not missing, f"{package}'s docstring names what is not there: {missing}"


def test_the_checks_see_a_face_that_drifted(tmp_path):
    """A stale module name, a used module left off the face, a name missing from a package's face."""
    tables = tmp_path / "harness" / "tables"
    tables.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text('"""Top."""\n__all__ = ["tables"]\n')
    (tables / "__init__.py").write_text(
        '"""`records`, `writer.write`, `os.environ`, `harness.tables.records`;\n'
        '`resume` is gone (resume.py), `writer.read` too."""\n__all__ = ["records"]\n')
    (tables / "records.py").write_text("ROWS = 1\n")
    (tables / "writer.py").write_text("def write(): ...\n")
    code = Code(tmp_path, ("harness",))
    assert named_in("harness.tables", code) == ["`resume`", "`writer.read`", "resume.py"]
    assert behind_the_face(Use("x.py:1", "", "harness.tables.writer"), code) == [
        "x.py:1: writer (used as harness.tables.writer) is not in harness.tables.__all__"]
    assert behind_the_face(Use("x.py:2", "harness.tables.records", "harness.tables.writer"), code) == []
    assert behind_the_face(Use("x.py:3", "", "harness.tables", ("records", "ROWS")), code) == [
        "x.py:3: ROWS (from harness.tables) is not in harness.tables.__all__"]
    assert behind_the_face(Use("x.py:4", "", "harness.tables.quotients"), code) == []  # a page writes it
