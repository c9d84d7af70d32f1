"""The import graph of the code (harness/, agents/, envs/, hydra_plugins/) has no cycle, counting
imports inside functions and under TYPE_CHECKING: agents and the harness meet in
harness/agent_api.py, the harness builds agents by `_target_`, and envs/ imports neither."""

import ast
import re
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


SUBPACKAGES = ("driver", "agent_run", "models", "tables", "report", "view", "bench", "sandbox", "training")
"""harness/ by concern; each __init__ says what it owns."""
LITELLM_PACKAGE = "harness.models"
TABLE_READERS = ("read_parquet", "scan_parquet", "read_table", "ParquetFile", "dataset")
"""Calls that read Parquet files: outside harness.tables, only through its `harness.tables.reading`."""
READS_FILES_OF_ITS_OWN = {
    "harness.agent_run.snapshots": "a snapshot's memory file, not a table",
    "harness.bench.synthetic_sweep": "splits a compacted table into parts to stage a running job for the "
                                     "viewer",
    "envs.dataset_reading": "a user's dataset file (how many rows a parquet holds), not a table",
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
    assert "envs" not in units["harness.models"], "the models import no environment (harness/models/chat.py)"


def test_only_harness_models_imports_litellm():
    importers = sorted(name for name, path in modules().items()
                       if any(i == "litellm" or i.startswith("litellm.") for i in imported_names(path)))
    assert importers and all(name.startswith(LITELLM_PACKAGE + ".") for name in importers), importers


LOADERS_BY_NAME = {"import_module", "__import__", "get_class", "get_method", "get_object", "locate"}
"""Calls that load a module or class by its dotted name (importlib, hydra.utils, pydoc)."""
AGENTS_NAME = re.compile(r"agents(\.\w+)+(:\w+)?")
"""A string that names a module or class of agents/ (`agents.memory_store`, `agents.memory:MemoryAgent`)."""


def agents_loaded(path: Path) -> list[str]:
    """Where a file reaches agents/ other than by a config's `_target_`, a line each: an import
    statement (at the top, in a function or under TYPE_CHECKING), a call that loads `agents` or
    `agents.<...>` by name (`importlib.import_module("agents.x")`, `__import__`, hydra's `get_class`),
    or a string other than a docstring naming an agents module (`MODULE = "agents.x"`, loaded
    elsewhere)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and _imports_agents(node):
            found.setdefault(node.lineno, ast.unparse(node))
        elif isinstance(node, ast.Call) and node.args and _called(node) in LOADERS_BY_NAME:
            name = node.args[0]
            first = name.values[0] if isinstance(name, ast.JoinedStr) and name.values else name
            if isinstance(first, ast.Constant) and str(first.value).split(".")[0].split(":")[0] == "agents":
                found.setdefault(node.lineno, ast.unparse(node))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and AGENTS_NAME.fullmatch(node.value.strip())):
            found.setdefault(node.lineno, repr(node.value))
    return [f"line {line}: {what}" for line, what in sorted(found.items())]


def _imports_agents(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] == "agents"
    return any(alias.name.split(".")[0] == "agents" for alias in node.names)


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def test_the_harness_never_imports_agents_not_even_by_name():
    found = {name: lines for name, path in modules().items()
             if name.split(".")[0] in ("harness", "hydra_plugins") and (lines := agents_loaded(path))}
    assert found == {}, "the harness builds agents by the config's _target_ alone (harness.agent_run.plan)"


def test_the_agents_check_sees_every_way_of_naming_them(tmp_path):
    code = tmp_path / "code.py"
    code.write_text('"""Built by `agents.memory` as its docstring says: not a load."""\n'
                    "import importlib\nimport agents.memory_store\nfrom agents import base\n"
                    "def lazy():\n    from agents.memory import MemoryAgent\n"
                    "importlib.import_module('agents.memory_store')\n__import__('agents')\n"
                    "importlib.import_module(f'agents.{lazy}')\nMODULE = 'agents.memory_store'\n"
                    "importlib.import_module('harness.agents_like')\nPATH = 'agents/memory_store.py'\n")
    lines = [int(found.split(":")[0].removeprefix("line ")) for found in agents_loaded(code)]
    assert lines == [3, 4, 6, 7, 8, 9, 10]


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


SHARED_MODULE_NAMES = {"__init__", "__main__", "base"}
"""Module names that several packages may use: the package itself, its command, and its base classes
(agents/base.py the agents', envs/base.py the environments')."""


def test_a_module_name_means_one_module_across_the_packages():
    by_name: dict[str, list[str]] = defaultdict(list)
    for name, path in modules().items():
        if path.stem not in SHARED_MODULE_NAMES:
            by_name[path.stem].append(name)
    assert {stem: found for stem, found in by_name.items() if len(found) > 1} == {}


def test_a_class_name_means_one_class_across_the_packages():
    by_name: dict[str, list[str]] = defaultdict(list)
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                by_name[node.name].append(name)
    assert {cls: found for cls, found in by_name.items() if len(found) > 1} == {}


LIBRARY_INSIDES = {"ray": "harness.driver.ray_insides", "hydra": "harness.driver.hydra_insides"}
"""The one module per library that may use its private insides, what no public API of it gives; each
with a test that names the installed version when an upgrade moves what it relies on."""
LIBRARIES = ("ray", "hydra", "omegaconf")
PATCHED_LIBRARIES = ("ray", "hydra")
"""Whose objects are not ours to assign to (an omegaconf config's keys are set by assignment)."""
IMPORTED = 1_000
"""How deep an imported name (a module, a class) is in its library: every attribute of it is its own."""


def _private(name: str) -> bool:
    """`_private`, `_global_node`: not `__ray_ready__` (a dunder) nor `_target_` (a config key)."""
    return name.startswith("_") and not name.endswith("_")


def _chain(node: ast.AST) -> tuple[str, int]:
    """The name an attribute chain starts at ("" for none), and how many attributes long it is after
    it; on `self` it starts at `self.<attribute>` (`self.context.config_loader`: "self.context", 1)."""
    depth, inner = 0, None
    while isinstance(node, ast.Attribute | ast.Subscript):
        inner, node, depth = node, node.value, depth + 1
    if isinstance(node, ast.Name) and node.id == "self" and isinstance(inner, ast.Attribute):
        return f"self.{inner.attr}", depth - 1
    return (node.id if isinstance(node, ast.Name) else ""), depth


def _held(nodes: list[ast.AST]) -> dict[str, tuple[str, int]]:
    """Name -> (library, depth) for the names of a file that hold something of Ray, Hydra or OmegaConf:
    the libraries' own names and what the file imports of them (`IMPORTED` deep); what is handed over
    (0 deep): a parameter annotated with one of their types, what a function of the file returns where
    its annotation names one, an element of either; and a name or an attribute of `self` assigned from
    any of these or an attribute of one (`loader = context.config_loader`: 1 deep; `self.context =
    context`: "self.context", 0 deep)."""
    held = {library: (library, IMPORTED) for library in LIBRARIES}
    for node in nodes:
        if isinstance(node, ast.Import):
            held.update({alias.asname or alias.name.split(".")[0]: (alias.name.split(".")[0], IMPORTED)
                         for alias in node.names if alias.name.split(".")[0] in LIBRARIES})
        elif (isinstance(node, ast.ImportFrom) and node.level == 0
              and (library := (node.module or "").split(".")[0]) in LIBRARIES):
            held.update({alias.asname or alias.name: (library, IMPORTED) for alias in node.names})
    binding = [node for node in nodes if isinstance(node, ast.arg | ast.Assign | ast.For | ast.AsyncFor
                                                      | ast.comprehension)]
    functions = [node for node in nodes
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None]
    while True:  # names held through names held through ...
        returning = {node.name: library for node in functions if (library := _naming(node.returns, held))}
        found = {name: value for node in binding for name, value in _bindings(node, held, returning).items()
                 if name not in held}
        if not found:
            return held
        held.update(found)


def _naming(annotation: ast.AST, held: dict[str, tuple[str, int]]) -> str | None:
    """The library of a type an annotation names, if it names one."""
    return next((held[name.id][0] for name in ast.walk(annotation) if isinstance(name, ast.Name)
                 and name.id in held), None)


def _bindings(node: ast.AST, held: dict[str, tuple[str, int]], returning: dict[str, str]
              ) -> dict[str, tuple[str, int]]:
    """The names (and `self.<attribute>`s) `node` binds to something of a library's, by what they are
    bound to."""
    if isinstance(node, ast.arg) and node.annotation is not None:
        library = _naming(node.annotation, held)
        return {node.arg: (library, 0)} if library else {}
    if isinstance(node, ast.Assign | ast.For | ast.AsyncFor | ast.comprehension):
        value = node.value if isinstance(node, ast.Assign) else node.iter
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(value, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            value = value.generators[0].iter
        if isinstance(value, ast.Call) and _called(value) in returning:
            bound = (returning[_called(value)], 0)
        elif (chain := _chain(value))[0] in held:
            library, depth = held[chain[0]]
            bound = (library, 0) if not isinstance(node, ast.Assign) else (library, depth + chain[1])
        else:
            return {}
        return {name: bound for name, depth in map(_chain, targets) if name and depth == 0}
    return {}


def _use(node: ast.AST, held: dict[str, tuple[str, int]]) -> str | None:
    """The library whose insides `node` reaches into, if it does."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                 if node.level == 0 and node.module else [])
        return next((name.split(".")[0] for name in names if name.split(".")[0] in LIBRARIES
                     and any(_private(part) for part in name.split("."))), None)
    if isinstance(node, ast.Attribute) and (root := _chain(node)[0]) in held and _chain(node)[1] > 0:
        library, depth = held[root]  # (not `self.x` itself: the attribute is the file's own)
        reached = depth + _chain(node)[1]
        patched = isinstance(node.ctx, ast.Store) and library in PATCHED_LIBRARIES and reached > 1
        return library if _private(node.attr) or patched else None
    if isinstance(node, ast.Call) and (root := _chain(node.func)[0]) in held:
        return held[root][0] if any(_private(keyword.arg or "") for keyword in node.keywords) else None
    if (isinstance(node, ast.Call) and _called(node) in ("getattr", "setattr", "delattr")
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            and (root := _chain(node.args[0])[0]) in held):
        library, depth = held[root]
        if _called(node) == "getattr":
            return library if _private(str(node.args[1].value)) else None
        return library if library in PATCHED_LIBRARIES and depth + _chain(node.args[0])[1] > 0 else None
    return None


def private_uses(path: Path) -> list[str]:
    """Where a file reaches into Ray's, Hydra's or OmegaConf's insides, a line each, library first: an
    import of a private module (`ray._private`, `ray._raylet`, `hydra._internal`, `from ray import
    _raylet`), an attribute or a
    keyword with a leading underscore on something of theirs (`ray._private.worker`, `getattr(node,
    "_global_node")`, `JobReturn(_return_value=...)`), or an assignment to an attribute of their
    machinery (a monkeypatch: `Node.start_api_server = ...`, `context.config_loader.load_sweep_config =
    ...`, also through `self`: `self.context = context` then `self.context.config_loader.x = ...`; a
    field of an object handed over, `job_return.return_value = ...`, is that object's to set)."""
    nodes = list(ast.walk(ast.parse(path.read_text())))
    held = _held(nodes)
    found: dict[int, str] = {}
    for node in nodes:
        if library := _use(node, held):
            found.setdefault(node.lineno, f"{library}: {ast.unparse(node).splitlines()[0]}")
    return [f"line {line}: {what}" for line, what in sorted(found.items())]


def test_only_one_module_per_library_reaches_into_ray_or_hydra():
    found = {}
    for name, path in modules().items():
        if name.split(".")[0] in ("harness", "hydra_plugins"):
            uses = [use for use in private_uses(path)
                    if LIBRARY_INSIDES.get(use.split(": ")[1]) != name]
            if uses:
                found[name] = uses
    assert found == {}, ("use the library's public API, or keep the private use in "
                         f"{' / '.join(LIBRARY_INSIDES.values())} with its version test")
    for library, module in LIBRARY_INSIDES.items():
        assert any(use.split(": ")[1] == library for use in private_uses(modules()[module])), \
            f"{module} uses nothing of {library}'s insides: remove it and its entry"


def test_the_insides_check_sees_every_way_of_reaching_in(tmp_path):
    code = tmp_path / "code.py"
    code.write_text("import ray\nimport ray._private.worker as w\nfrom ray._raylet import GcsClient\n"
                    "from hydra._internal.utils import x\nfrom hydra.core.utils import JobReturn\n"
                    "from hydra.types import HydraContext\nfrom omegaconf import DictConfig, OmegaConf\n"
                    "def f(context: HydraContext, cfg: DictConfig, done: JobReturn):\n"
                    "    node = ray._private.worker._global_node\n"  # 9
                    "    loader = context.config_loader\n"
                    "    loader.load_sweep_config = None\n"  # 11
                    "    context.config_loader.load_sweep_config = None\n"  # 12
                    "    getattr(w, '_global_node', None)\n"  # 13
                    "    setattr(ray.util, 'x', 1)\n"  # 14
                    "    OmegaConf._get_node(cfg)\n"  # 15
                    "    JobReturn(_return_value=1)\n"  # 16
                    "    ray.util.metrics = None\n"  # 17
                    "    cfg.hydra.job.id = 1\n"
                    "    cfg._target_\n"
                    "    ray.get(a.__ray_ready__.remote())\n"
                    "    done.return_value = 1\n"
                    "    self._private = 1\n"
                    "    ray.init(address='local', **options)\n"
                    "def jobs() -> list[JobReturn]: ...\n"
                    "def g():\n"
                    "    ray = sys.modules.get('ray')\n"
                    "    ray._private.worker\n"  # 27
                    "    failed = [r for r in jobs() if r]\n"
                    "    for result in failed:\n"
                    "        result._return_value\n"  # 30
                    "from ray import _raylet\n"  # 31
                    "from hydra import _internal, utils\n"  # 32
                    "class Launcher:\n"
                    "    def setup(self, hydra_context: HydraContext):\n"
                    "        self._context = hydra_context\n"
                    "        self._context.config_loader.load_sweep_config = None\n"  # 36
                    "        self._context.config_loader = None\n"
                    "        self._context._internal\n"  # 38
                    "        self._own = None\n")
    lines = [int(found.split(":")[0].removeprefix("line ")) for found in private_uses(code)]
    assert lines == [2, 3, 4, 9, 11, 12, 13, 14, 15, 16, 17, 27, 30, 31, 32, 36, 38]
