"""The import graph of the code (harness/, agents/, envs/, hydra_plugins/) has no cycle, counting
imports inside functions and under TYPE_CHECKING: agents and the harness meet in
harness/agent_api.py, the harness builds agents by `_target_`, and envs/ imports neither."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "agents", "envs", "hydra_plugins")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, pending = set(), list(graph.get(start, ()))
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending += graph.get(node, ())
    return seen


def cycles(graph: dict[str, set[str]]) -> list[str]:
    return sorted(node for node in graph if node in reachable(graph, node))


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_no_package_imports_itself_through_others():
    packages: dict[str, set[str]] = defaultdict(set)
    for module, imported in import_graph().items():
        for other in imported:
            if module.split(".")[0] != other.split(".")[0]:
                packages[module.split(".")[0]].add(other.split(".")[0])
    assert cycles(packages) == [], dict(packages)
    assert not packages["envs"], "envs/ is a leaf"
    assert "agents" not in packages["harness"], "the harness builds agents by _target_, never by import"


def test_the_check_sees_a_cycle_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a", "b"]


SUBPACKAGES = ("driver", "agent_run", "models", "tables", "report", "view", "bench", "sandbox")
"""harness/ by concern; each __init__ says what it owns."""
LITELLM_PACKAGE = "harness.models"
TABLE_READERS = ("read_parquet", "scan_parquet", "read_table", "ParquetFile", "dataset")
"""Calls that read Parquet files: outside harness.tables, only through its `harness.tables.reading`."""
READS_FILES_OF_ITS_OWN = {
    "harness.agent_run.snapshots": "a snapshot's memory file, not a table",
    "harness.bench.view": "splits a compacted table into parts to stage a running job for the viewer",
    "envs.dataset": "a user's dataset file (how many rows a parquet holds), not a table",
}


def harness_unit(module: str) -> str:
    """The subpackage (or top-level module) of harness a module belongs to; the package for others."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" and len(parts) > 1 else parts[0]


def imported_names(path: Path) -> list[str]:
    """Every module a file imports, at the top, in functions or under TYPE_CHECKING."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_each_subpackage_of_the_harness_says_what_it_owns():
    found = sorted(p.parent.name for p in (ROOT / "harness").glob("*/__init__.py"))
    assert found == sorted(SUBPACKAGES)
    for name in SUBPACKAGES:
        docstring = ast.get_docstring(ast.parse((ROOT / "harness" / name / "__init__.py").read_text()))
        assert docstring and len(docstring.split()) >= 20, f"harness/{name}/__init__.py: say what it owns"


def test_the_harness_subpackages_import_each_other_without_a_cycle():
    units: dict[str, set[str]] = defaultdict(set)
    for module, imported in import_graph().items():
        for other in imported:
            if harness_unit(module) != harness_unit(other):
                units[harness_unit(module)].add(harness_unit(other))
    assert cycles(units) == [], dict(units)
    assert not units["harness.tables"] - {"harness.errors", "harness.files", "harness.text"}, \
        "the tables stand on the foundations alone"


def test_only_harness_models_imports_litellm():
    importers = sorted(name for name, path in modules().items()
                       if any(i == "litellm" or i.startswith("litellm.") for i in imported_names(path)))
    assert importers and all(name.startswith(LITELLM_PACKAGE + ".") for name in importers), importers


def test_agents_meet_the_harness_only_through_the_contract():
    for name, path in modules().items():
        if name.split(".")[0] == "agents":
            harness = {i for i in imported_names(path) if i.split(".")[0] == "harness"}
            assert harness <= {"harness", "harness.agent_api"}, (name, harness)


def test_only_harness_tables_reads_the_tables():
    readers = {}
    for name, path in modules().items():
        if name.startswith(("harness.tables", "harness.view")) or name in READS_FILES_OF_ITS_OWN:
            continue  # the viewer reads `table_files` through its own SQL engine (harness/view/store.py)
        calls = {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in TABLE_READERS}
        if calls:
            readers[name] = sorted(calls)
    assert readers == {}, "read the tables through harness.tables.reading"


MAX_FUNCTION_LINES = 60
"""Lines of a function or method, its decorators left out: past it, split it into steps with names."""


def test_no_function_is_longer_than_60_lines():
    too_long = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name} (line {node.lineno}): {lines} lines")
    assert too_long == [], "split into named steps: " + "; ".join(too_long)
