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
