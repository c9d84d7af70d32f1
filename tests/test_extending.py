"""docs/extending.md: every code block of the page runs against the real code.

The page marks its blocks by their first line: `# file: PATH` is (part of) a new file, the blocks
naming one file joined in order; `# add to: PATH` is code added to an existing module; `# try it`
runs once those are in place, the blocks of one section in one namespace. The new files go to a
temporary directory that the `agents` and `envs` packages and Hydra's search path read too, so
nothing is written into the checkout; an addition becomes a name of its module (and a new record a
table of the registry) for these tests only. Each `python -m harness ...` command of the page runs
in-process on the scripted model, as tests/conftest.py `run_variant` runs one.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

import agents
import envs
import envs.scorers
from envs.scorers import Scorer
from harness.config import ConfigError
from harness.tables import records
from tests.agent_run.test_variant_defaults import code_defaults, disagreements
from tests.conftest import CONF_DIR, AgentRun, compose_config, run_variant

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^## (.+)$", re.MULTILINE)
NEW_FILE = re.compile(r"# file: (\S+)$")
ADDITION = re.compile(r"# add to: (\S+\.py)\b")
TRY_IT = "# try it"
COMMAND = "python -m harness "


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    code: str

    @property
    def marker(self) -> str:
        return self.code.partition("\n")[0].strip()


def page_blocks() -> list[Block]:
    text = PAGE.read_text()
    found = []
    for fence in FENCE.finditer(text):
        headings = HEADING.findall(text[:fence.start()])
        found.append(Block(headings[-1] if headings else "", fence.group(1), fence.group(2)))
    return found


BLOCKS = page_blocks()


def new_files() -> dict[str, str]:
    files: dict[str, str] = {}
    for block in BLOCKS:
        if match := NEW_FILE.match(block.marker):
            files[match.group(1)] = files.get(match.group(1), "") + block.code
    return files


def tries(section: str) -> list[Block]:
    return [b for b in BLOCKS if b.section == section and b.marker == TRY_IT]


def commands(section: str) -> list[list[str]]:
    """The overrides of each `python -m harness` command of a section."""
    lines = [line for b in BLOCKS if b.section == section and b.language == "bash"
             for line in b.code.splitlines() if line.startswith(COMMAND)]
    return [shlex.split(line.removeprefix(COMMAND)) for line in lines]


def run_tries(section: str) -> None:
    blocks = tries(section)
    assert blocks, f"no `{TRY_IT}` block in the section {section!r}"
    namespace: dict[str, object] = {"__name__": "extending_try_it"}
    for block in blocks:
        exec(compile(block.code, f"{PAGE.name}, {section}", "exec"), namespace)


@dataclass(frozen=True)
class Extended:
    root: Path

    @property
    def search_path(self) -> str:
        return f"hydra.searchpath=[file://{self.root / 'conf'}]"

    def run(self, overrides: list[str]) -> AgentRun:
        return run_variant(*overrides, self.search_path)


def add_to(patch: pytest.MonkeyPatch, root: Path, path: str, code: str, number: int) -> None:
    """Run `code` as if it were added to the module at `path`: in a module of its own that starts
    with everything of that module (a real file, so pydantic reads the fields' docstrings), whose
    new names are then given to the module; a new record is listed in the table registry."""
    target = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    name = f"extending_addition_{number}"
    file = root / "additions" / f"{name}.py"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(f"from {target.__name__} import *  # noqa: F403\n{code}")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    patch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    for key, value in vars(module).items():
        if key.startswith("__") or key in vars(target):
            continue
        patch.setattr(target, key, value, raising=False)
        if isinstance(value, type) and issubclass(value, records.Record) and "table" in vars(value):
            patch.setitem(records.TABLES, value.table, value)


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Extended]:
    root = tmp_path_factory.mktemp("extending")
    for path, code in new_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code)
    importlib.invalidate_caches()
    with pytest.MonkeyPatch.context() as patch:
        for package in (agents, envs, envs.scorers):
            own = root.joinpath(*package.__name__.split("."))
            patch.setattr(package, "__path__", [*package.__path__, str(own)])
        additions = [b for b in BLOCKS if ADDITION.match(b.marker)]
        for number, block in enumerate(additions):
            match = ADDITION.match(block.marker)
            assert match is not None
            add_to(patch, root, match.group(1), block.code, number)
        yield Extended(root)
        for name, module in list(sys.modules.items()):  # the example's modules, gone with its files
            if str(getattr(module, "__file__", None) or "").startswith(str(root)):
                del sys.modules[name]
        for name, cls in list(Scorer.registry.items()):  # and their scorers' names
            if cls.__module__ not in sys.modules:
                del Scorer.registry[name]


def test_every_block_is_marked_and_every_new_file_compiles():
    unmarked = [b.code[:60] for b in BLOCKS if b.language in ("python", "yaml")
                and not (NEW_FILE.match(b.marker) or ADDITION.match(b.marker) or b.marker == TRY_IT)]
    assert not unmarked, f"blocks without # file:, # add to: or # try it: {unmarked}"
    assert all(line.startswith(COMMAND) for b in BLOCKS if b.language == "bash"
               for line in b.code.splitlines() if line.strip())
    files = new_files()
    assert {"agents/hinting.py", "conf/variant/hinting.yaml", "envs/sums.py", "conf/env/sums.yaml",
            "envs/scorers/close_enough.py", "envs/quotients.py", "conf/env/quotients.yaml"} <= set(files)
    for path, code in files.items():
        if path.endswith(".py"):
            compile(code, path, "exec")
        else:
            assert OmegaConf.create(code), path


def test_the_variant_composes_by_its_target_and_learns_from_its_first_task(extended):
    [command] = commands("Adding a variant")
    run = extended.run(command)
    episodes = run.rows["episodes"]
    assert len(episodes) == 2 and all(e["error"] is None and not e["success"] for e in episodes)
    hint = "Take care: you answered a capital question wrong before."
    first, second = (request.messages[-1]["content"] for request in run.requests("act"))
    assert hint not in first and second.startswith(hint)
    [snapshot] = [s for s in run.rows["snapshots"] if s["final"]]
    assert '"failed": [' in (run.workdir / snapshot["path"] / "state.json").read_text()


def test_the_variants_code_defaults_are_its_yamls_values(extended):
    variant = OmegaConf.to_container(compose_config(extended.search_path, "variant=hinting").variant)
    base = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "variant" / "parts" / "base.yaml"))
    own = {k: v for k, v in variant.items() if k not in {*base, "name", "_target_"}}
    assert own == {"hint_prompt": "Take care: you answered a {family} question wrong before."}
    assert not disagreements(own, code_defaults(get_class(variant["_target_"])), "variant=hinting")


def test_a_template_without_its_placeholder_is_refused_in_the_line_the_page_shows(extended):
    says = "invalid config: variant: ValueError: variant.hint_prompt must contain {family}"
    assert f"`{says}`" in PAGE.read_text()
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        extended.run(["variant=hinting", "variant.hint_prompt=no placeholder"])


def test_the_environment_runs_and_scores_by_exact_match(extended):
    [command] = commands("Adding an environment")
    episodes = extended.run(command).rows["episodes"]
    assert len(episodes) == 2
    assert all(e["error"] is None and e["task_id"].startswith("sum-") for e in episodes)
    assert all(e["success"] == (e["response"] or "").isdigit() for e in episodes)
    says = "invalid config: env: ValueError: env.size must be >= 1, got 0"
    assert f"`{says}`" in PAGE.read_text()
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        extended.run(["env=sums", "env.size=0"])


def test_the_scorer_gives_partial_credit_and_runs(extended):
    run_tries("Adding a scorer")
    [command] = commands("Adding a scorer")
    episodes = extended.run(command).rows["episodes"]
    assert len(episodes) == 2
    assert all(e["error"] is None and e["task_id"].startswith("quotient-") for e in episodes)
    assert all(0.0 <= e["score"] <= 1.0 and e["success"] == (e["score"] == 1.0) for e in episodes)


def test_the_scorer_is_a_scorer_found_by_its_name_and_a_second_of_a_name_is_refused_as_the_page_says(
        extended):
    assert isinstance(envs.scorers.scorer({"name": "close_enough", "tolerance": 0.5}), Scorer)
    [says] = re.findall(r"`ValueError: (scorer 'exact' is defined twice: [^`]+)`", PAGE.read_text())
    body = {"name": "exact", "__module__": "myscorers.exact", "__qualname__": "MyExact",
            "score": lambda self, reply, task: None}
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        type("MyExact", (Scorer,), body)
    assert Scorer.registry["exact"].__module__ == "envs.scorers.exact"


def test_the_table_is_written_and_read_back_like_every_table(extended):
    assert records.TABLES["hint_events"].__name__ == "HintEventRow"
    model = records.TABLES["hint_events"]
    assert all(field.description for field in model.model_fields.values())
    assert model.arrow_schema().names == list(model.model_fields)
    run_tries("Adding a table")

