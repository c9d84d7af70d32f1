"""Every command the documentation shows runs as shown: README.md, docs/*.md and `python -m harness --help`
(conf/hydra/help/harness.yaml), each checked as `python -m harness` checks a job before anything starts.

Where commands are found
- In a shell code block (```bash, sh, shell, console) of README.md or docs/*.md: every line that starts
  with `python -m harness` (a trailing `\\` continues it on the next line; ` #` starts a comment). Other
  blocks are diagrams or output (README's "How it fits together").
- In the prose of those pages, an inline code span that starts with `python -m harness`, one that holds
  nothing but overrides of the config (`stream.repeats=3`, `-m variant=baseline,memory`), and one that
  names a key of a config group (`model.params.temperature`).
- In `python -m harness --help` as it prints: every line that starts with `python -m harness`, and every
  line that starts with overrides (the `== Useful overrides ==` column); the description after them is
  not part of the command.
docs/extending.md is left to tests/test_extending.py, which writes the page's files first. A broken
command fails its page's test with one line: `page:line: command: Hydra's or the config's message`.

What is checked
- `python -m harness ...` (and a help line of overrides): split as the shell splits it, composed with
  Hydra's compose API as written; with `-m`, every job of the sweep as Hydra's basic sweeper makes them
  (`a,b`, `range(...)`, `choice(...)`: every combination). Every job is validated by
  `HarnessConfig.from_dictconfig`, planned (`build_plan`: the env's tasks, `stream.num_tasks` against
  them, an interleaved stream's families, the sealed gate's tuning split, probes) and its agent built
  unconnected (`check_agents_build`), as a run does before it starts; an API model's name and parameters
  are checked against litellm as the preflight checks them (not its key: the tests have none). Not
  checked: what needs the machine the run is for (a cache or output directory, a server at `api_base`).
- An override span in prose stands in its page's context (`variant.select=judge variant.judge={}` in
  best_of_k's row): it passes when it holds with the defaults or with some option of the group its keys
  are in; when it holds with none, the option it got furthest with says why. A key named in prose exists
  in some option of its group (a key that only `+key=value` adds must be written so).
- Another entry point (`python -m harness.report`, `.view`, `.evaluate`, `.bench`, `.warm`): every `--flag`
  of the line, its comment included, is one that its `--help` lists (`python -m harness.bench <name>`:
  that measurement's `--help`);
  `harness.evaluate`'s `--views`, `--ood` and `--set` values are checked as it checks them.

Placeholders
- `...` standing alone (`python -m harness ... ray.address=auto`: your other overrides) and a part in
  brackets at the start of a word (`[key=value ...]`, `[--out OUT]`: a synopsis's optional part; its
  flags are still checked) are left out.
- An override whose value holds a placeholder (a word of PLACEHOLDERS such as `DIR`, `DATE/TIME`, `N`,
  or `<...>`, or `...` outside quotes), or in prose has no value (`env.challenge=`), is checked for its
  key only: the key must exist in the config the rest of the command composes. One whose key is a
  placeholder (`key=a,b`, `group=option`) is left out.
- An example file stands for a real one (FIXTURES: `env.path=tasks.jsonl` reads
  tests/data/sample_tasks.jsonl).

Marked to fail
A code-block line that ends with `# fails: <why>` shows a command that is refused before it starts: the
test checks that it is, by Hydra or by the config's checks (any other exception is a bug of its own).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import harness.agent_run.plan as plan
import harness.agent_run.tasks as tasks
from harness.bench.cli import MEASUREMENTS
from harness.config import ConfigError, HarnessConfig
from harness.driver import until_decided

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "extending.md")]
HELP = "python -m harness --help"

PLACEHOLDERS = {"DIR", "SWEEP", "OUT", "PATH", "DATE", "TIME", "JOB", "N", "NAME", "KEY", "VALUE"}
"""Words that stand for a value of the reader's (`hydra.run.dir=DIR`, `stream.repeats=N`)."""
SYNOPSIS_KEYS = {"key", "group", "option"}
"""Words that stand for any key in a synopsis (`-m key=a,b`, `group=option`)."""
FIXTURES = {"tasks.jsonl": str(ROOT / "tests" / "data" / "sample_tasks.jsonl")}
"""Example files the docs name, and the real file each is checked with."""
ENTRY_POINTS = ("harness.report", "harness.view", "harness.evaluate", "harness.bench", "harness.warm")
BENCH_ENTRIES = tuple(f"harness.bench {name}" for name in MEASUREMENTS)
"""`python -m harness.bench <name>`: each measurement's own flags."""
HYDRA_FLAGS = {"-m": False, "--multirun": False, "--cfg": True, "-c": True, "--resolve": False,
               "--package": True, "-p": True, "--help": False, "-h": False, "--hydra-help": False}
"""Hydra's own flags the docs use, and whether each takes a value."""
CHECKED = (HydraException, OmegaConfBaseException, ConfigError)
"""How a refused command fails: Hydra's errors and the config's (ConfigError)."""

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")
OPTIONS = {group: sorted(p.stem for p in (CONF / group).glob("*.yaml")) for group in GROUPS}
"""Every option of every config group (a group's `parts/` are pieces its options start from)."""


@dataclass(frozen=True)
class Command:
    where: str
    """page:line"""
    text: str
    """As the page writes it, without its comment."""
    kind: str
    """shell: a command line; overrides: a span of overrides in prose; key: a key named in prose."""
    comment: str = ""
    fails: str | None = None
    """Why it is refused, where the page marks it `# fails: <why>`."""


# ----- finding the commands -----

def split_comment(line: str) -> tuple[str, str]:
    """The line's code and its comment (from a `#` at the start of a word, outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def shell_command(where: str, line: str) -> Command:
    code, comment = split_comment(line)
    marked = re.match(r"fails:\s*(.+)", comment)
    return Command(where, code.strip(), "shell", comment, marked.group(1) if marked else None)


SHELL_BLOCKS = ("bash", "sh", "shell", "console")
"""Code blocks in these languages hold commands (a block without one is a diagram or output)."""
COMMAND = re.compile(r"python -m harness(?:\.[\w.]+)?(?:\s|$)")


def block_commands(text: str, page: str) -> list[Command]:
    """Lines of shell code blocks that start with `python -m harness`, continuation lines joined."""
    found, language, pending, start = [], None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            language = line.strip()[3:].strip() if language is None else None
            continue
        stripped = line.strip().removeprefix("$ ")
        if language not in SHELL_BLOCKS or not (pending or COMMAND.match(stripped)):
            continue
        start = start or number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        found.append(shell_command(f"{page}:{start}", pending + stripped))
        pending, start = "", 0
    return found


def hydra_words(text: str) -> list[str]:
    """`text` split at spaces outside quotes and brackets, as Hydra reads one override."""
    words, word, depth, quote = [], "", 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char.isspace() and depth == 0:
            words, word = ([*words, word] if word else words), ""
            continue
        word += char
    return [*words, word] if word else words


OVERRIDE = re.compile(r"[+~]{0,2}(?P<key>[A-Za-z_][\w/.]*)(?:@[\w./]*)?(?P<eq>=?)(?P<value>.*)", re.DOTALL)
KEY = re.compile(r"[a-z_]+(?:\.[a-z_0-9]+)+")


@functools.cache
def config_roots() -> frozenset[str]:
    return frozenset([*compose_job(()).keys()])


def is_override(word: str) -> bool:
    """An override of the config (`stream.num_tasks=20`, `~env.settings`, `hydra/launcher=basic`), or `-m`."""
    if word in ("-m", "--multirun"):
        return True
    match = OVERRIDE.fullmatch(word)
    if not match or not (match["eq"] or word.startswith("~")):
        return False
    root = re.split(r"[./]", match["key"])[0]
    return root in config_roots() or root in SYNOPSIS_KEYS


CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
"""An inline code span as Markdown reads one: closed by as many backticks as opened it, within a paragraph."""


def prose_commands(text: str, page: str) -> list[Command]:
    """Inline code spans of the prose that are a command, overrides, or a config key."""
    kept = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            line = ""
        kept.append("" if fenced else line)
    prose = "\n".join(kept)
    found = []
    for span in CODE_SPAN.finditer(prose):
        where = f"{page}:{prose.count(chr(10), 0, span.start()) + 1}"
        content = " ".join(span.group(2).split())
        if COMMAND.match(content):
            found.append(shell_command(where, content))
        elif all(is_override(word) for word in hydra_words(content)):
            found.append(Command(where, content, "overrides"))
        elif KEY.fullmatch(content) and content.split(".")[0] in GROUPS:
            found.append(Command(where, content, "key"))
    return found


def help_commands(text: str) -> list[Command]:
    """Lines of `--help` that start with `python -m ` or with overrides, without their description."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{HELP}:{number}"
        stripped = line.strip()
        if stripped.startswith("python -m harness."):
            found.append(shell_command(where, stripped))
            continue
        words = without_synopsis(stripped.removeprefix("python -m harness")).split()
        first = OVERRIDE.fullmatch(words[0]) if words else None  # `key=value);` in prose is no command
        overrides_first = bool(first and is_override(words[0]) and first["key"] not in SYNOPSIS_KEYS)
        if stripped.startswith("python -m harness") or words[:1] == ["-m"] or overrides_first:
            overrides = list(itertools.takewhile(is_override, words))
            found.append(Command(where, " ".join(["python -m harness", *overrides]), "shell"))
    return found


@functools.cache
def harness_help() -> str:
    return subprocess.run([sys.executable, "-m", "harness", "--help"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def page_commands(page: Path) -> list[Command]:
    text, name = page.read_text(), str(page.relative_to(ROOT))
    return block_commands(text, name) + prose_commands(text, name)


# ----- checking them -----

def one_line(error: BaseException) -> str:
    """Hydra's or pydantic's message in one line, with its cause ("Key 'x' is not in struct")."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    cause = error.__cause__
    reason = (str(cause).strip().splitlines() or [""])[0] if cause else ""
    return f"{first} ({reason})" if reason and reason not in first else first


@functools.cache
def compose_job(overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


_REAL_TASK_POOL = tasks.task_pool


@functools.cache
def _task_pool(env_cfg: str, tuning_size: int | None) -> tuple[list, list]:
    return _REAL_TASK_POOL(json.loads(env_cfg), tuning_size)


@contextlib.contextmanager
def tasks_built_once() -> Iterator[None]:
    """An env's tasks built once per env config for all the checks (some envs take seconds)."""
    tasks.task_pool = lambda cfg, size: _task_pool(json.dumps(cfg, sort_keys=True), size)  # type: ignore[assignment]
    try:
        yield
    finally:
        tasks.task_pool = _REAL_TASK_POOL


def remote_model_problems(settings: HarnessConfig) -> None:
    """What the preflight asks litellm of an API model: can it route the name, does it take the parameters."""
    from harness.driver.preflight import check_params, is_harness_served
    from harness.models.capabilities import check_model_name

    for model, field in ((settings.model, "model.name"), (settings.embedder, "embedder.name")):
        if not is_harness_served(model):
            check_model_name(model.name, field)
    if not is_harness_served(settings.model):
        check_params(settings.model)


@functools.cache
def job_problem(overrides: tuple[str, ...], key_only: tuple[str, ...] = ()) -> tuple[int, str] | None:
    """Why this job would not start (None: it would), with how far it got: 0 composing, 1 its keys,
    2 validating, 3 planning, 4 building the agent, 5 the API model's checks."""
    from harness.driver.preflight import check_agents_build

    stage = 0
    try:
        cfg = compose_job(overrides)
        until_decided.first_round(cfg)  # seeds=until_decided: the launcher gives each round its seeds
        stage = 1
        missing = [key for key in key_only if OmegaConf.select(cfg, key, default=KeyError) is KeyError]
        if missing:
            return stage, f"no key {missing[0]} in the config"
        stage = 2
        settings = HarnessConfig.from_dictconfig(cfg)
        stage = 3
        with tasks_built_once():
            specs = plan.build_plan(settings, Path(tempfile.gettempdir()) / "harness-doc-commands")
        stage = 4
        check_agents_build(specs)
        stage = 5
        remote_model_problems(settings)
    except CHECKED as error:
        return stage, one_line(error)
    return None


def placeholder_in(text: str) -> bool:
    unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "", text)
    return ("..." in unquoted or re.search(r"<[^>]*>", unquoted) is not None
            or bool(set(re.findall(r"[A-Za-z_]+", unquoted)) & PLACEHOLDERS))


def without_synopsis(text: str) -> str:
    """`text` less its optional parts in brackets at the start of a word (`[key=value ...]`)."""
    return re.sub(r"(?<!\S)\[[^\]]*\]", " ", text)


def harness_problem(words: list[str], in_context: bool = False) -> str | None:
    """Why `python -m harness <words>` would not start; `in_context`: with some option of the groups its
    keys are in, as a span of prose means it."""
    multirun, overrides, key_only = False, [], []
    words = iter(words)
    for word in words:
        if word in HYDRA_FLAGS:
            multirun = multirun or word in ("-m", "--multirun")
            if HYDRA_FLAGS[word]:
                next(words, None)
            continue
        if word == "...":
            continue
        match = OVERRIDE.fullmatch(word)
        if word.startswith("-") or not match or not (match["eq"] or word.startswith("~")):
            return f"{word!r} is not an override (key=value) or a flag of Hydra's"
        key, value = match["key"], FIXTURES.get(match["value"], match["value"])
        if key in SYNOPSIS_KEYS:
            continue
        if placeholder_in(value) or (in_context and match["eq"] and not value):
            if not word.startswith("+"):
                key_only.append(key.replace("/", "."))
            continue
        overrides.append(word.replace(match["value"], value) if value != match["value"] else word)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        return one_line(error)
    jobs = BasicSweeper.split_arguments(parsed, None)[0] if multirun else [overrides]
    contexts: list[tuple[str, ...]] = [()]
    if in_context:
        keys = [*(o.key_or_group for o in parsed), *key_only]
        groups = [g for g in GROUPS if g not in keys and any(k.startswith(f"{g}.") for k in keys)]
        contexts += [tuple(f"{g}={o}" for g, o in zip(groups, pick, strict=True))
                     for pick in itertools.product(*(OPTIONS[g] for g in groups)) if groups]
    failures = []
    for context in contexts:
        problems = [(job, job_problem((*context, *job), tuple(key_only))) for job in jobs]
        failed = next(((job, found) for job, found in problems if found), None)
        if failed is None:
            return None
        job, (stage, message) = failed
        said = [f"with {' '.join(context)}"] if context else []
        said += [f"job {' '.join(job)}"] if len(jobs) > 1 else []
        failures.append((stage, f"{', '.join(said)}: {message}" if said else message))
    # the option that got furthest says most (not the defaults' "no such key" for another group's key)
    return max(failures, key=lambda failure: failure[0])[1]


def key_problem(key: str) -> str | None:
    """A key named in prose exists with the defaults or some option of its group."""
    group = key.split(".")[0]
    contexts = [(f"{group}={option}",) for option in OPTIONS[group]]
    if any(OmegaConf.select(compose_job(c), key, default=KeyError) is not KeyError for c in contexts):
        return None
    return f"no key {key} in any option of {group} (one that `+{key}=...` adds must be written so)"


@functools.cache
def entry_point_help(entry: str) -> str:
    """What `python -m <entry> --help` prints (`entry`: a module and any words before `--help`, as
    `harness.bench sweep`; run in this process: the imports are shared)."""
    module, *words = entry.split()
    out, argv = io.StringIO(), sys.argv
    sys.argv = [module, *words, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
    return out.getvalue()


@functools.cache
def entry_point_flags(entry: str) -> frozenset[str]:
    """The flags `python -m <entry> --help` lists in its usage line."""
    usage = entry_point_help(entry).split("\n\n")[0]
    return frozenset(re.findall(r"(?<![\w-])--?[a-z][\w-]*", usage))


def entry_point_problem(module: str, words: list[str], comment: str) -> str | None:
    if module not in ENTRY_POINTS:
        return f"no entry point python -m {module}"
    entry = f"{module} {words[0]}" if words and f"{module} {words[0]}" in BENCH_ENTRIES else module
    flags = [w.partition("=")[0] for w in words if w.startswith("-")]
    flags += re.findall(r"(?<![\w-])--[a-z][\w-]*", comment)
    unknown = [flag for flag in flags if flag not in entry_point_flags(entry)]
    if unknown:
        known = ", ".join(sorted(entry_point_flags(entry)))
        return f"python -m {entry} has no flag {unknown[0]} (its --help: {known})"
    return evaluate_problem(words) if module == "harness.evaluate" else None


def evaluate_problem(words: list[str]) -> str | None:
    """`--views`, `--ood` and `--set` of `python -m harness.evaluate`, checked as it checks them, on
    the defaults for the source runs' config."""
    from harness.evaluate import VIEWS, _with_changes, ood_env

    values = {flag: [b for a, b in itertools.pairwise(words) if a == flag]
              for flag in ("--views", "--ood", "--set")}
    settings = HarnessConfig.from_dictconfig(compose_job(()))
    try:
        for views in values["--views"]:
            wrong = set(views.split(",")) - set(VIEWS)
            if wrong:
                return f"--views: no view {sorted(wrong)[0]} (views: {', '.join(VIEWS)})"
        for ood in values["--ood"]:
            env = tasks.env_families(ood_env(settings, ood), settings.stream.scenario)
            with tasks_built_once():
                tasks.task_pool(env.instantiable(), 0)
        for change in values["--set"]:
            if not placeholder_in(change):
                _with_changes(settings, [change])
    except CHECKED as error:
        return one_line(error)
    return None


def problem(command: Command) -> str | None:
    """Why the command would not do what the page says (None: it would)."""
    if command.kind == "key":
        return key_problem(command.text)
    if command.kind == "overrides":
        return harness_problem(hydra_words(command.text), in_context=True)
    flags_in_brackets = re.findall(r"(?<![\w-])--[a-z][\w-]*", " ".join(re.findall(r"(?<!\S)\[[^\]]*\]",
                                                                                   command.text)))
    try:
        words = shlex.split(without_synopsis(command.text))
    except ValueError as error:
        return f"the shell cannot read it: {error}"
    module = words[2] if len(words) > 2 and words[:2] == ["python", "-m"] else ""
    if module == "harness":
        return harness_problem(words[3:])
    return entry_point_problem(module, [*words[3:], *flags_in_brackets], command.comment)


def verdict(command: Command) -> str | None:
    """The line a broken command fails the test with (None: the page is right)."""
    try:
        found = problem(command)
    except Exception as error:
        error.add_note(f"while checking {command.where}: {command.text}")
        raise
    if command.fails is None and found:
        return f"{command.where}: {command.text}: {found}"
    if command.fails is not None and not found:
        return f"{command.where}: {command.text}: marked `# fails: {command.fails}`, but it starts"
    return None


# ----- the docs -----

@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_of_the_page_runs_as_shown(page):
    broken = [line for line in map(verdict, page_commands(page)) if line]
    assert not broken, "commands that do not do what the page says:\n" + "\n".join(broken)


@pytest.mark.slow
def test_every_command_of_the_help_runs_as_shown():
    commands = help_commands(harness_help())
    assert len(commands) >= 12, commands
    broken = [line for line in map(verdict, commands) if line]
    assert not broken, "commands that do not do what --help says:\n" + "\n".join(broken)


def test_the_commands_are_found():
    found = {page.name: page_commands(page) for page in PAGES}
    assert sum(c.kind == "shell" for c in found["README.md"]) >= 25
    assert {c.kind for c in found["variants.md"]} >= {"overrides", "key"}
    assert any(c.fails for commands in found.values() for c in commands), "no `# fails:` example left"
    shown = [c.text for commands in found.values() for c in commands]
    assert any(text.startswith("python -m harness.evaluate") for text in shown)


# ----- the help texts -----

def help_groups(text: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The config groups `python -m harness --help` lists with their options, and the defaults it names."""
    section = text.split("== Config groups", 1)[1].split("\n==", 1)[0]
    listed = re.findall(r"^  ([\w/]+): (.+)$", section, re.MULTILINE)
    groups = {group: options.split(", ") for group, options in listed}
    defaults = re.search(r"^  By default: (.+)$", section, re.MULTILINE)
    assert defaults, section
    return groups, dict(choice.split("=") for choice in defaults.group(1).split())


@pytest.mark.slow
def test_the_help_lists_every_option_of_every_group_and_its_default_and_no_parts():
    text = harness_help()
    defaults = {group: option for entry in yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
                if isinstance(entry, dict) for group, option in entry.items() if " " not in group}
    groups, said = help_groups(text)
    assert groups == OPTIONS  # every option of every group, in order, and no group that is not one
    assert said == defaults
    assert "parts" not in text.split("== Config groups", 1)[1].split("\n==", 1)[0]
    assert "$APP_CONFIG_GROUPS" not in text and "${" not in text


@pytest.mark.parametrize("module", [*ENTRY_POINTS, *BENCH_ENTRIES])
def test_an_entry_points_help_says_whole_sentences_and_what_each_option_does(module):
    text = entry_point_help(module)
    description = " ".join(text.split("\n\n")[1].split())
    assert description.endswith("."), f"python -m {module} --help stops mid-sentence: {description!r}"
    options = text.split("options:\n", 1)[1].splitlines()
    silent = [line.strip() for line, after in zip(options, [*options[1:], ""], strict=True)
              if re.match(r"  -", line) and not re.match(r"  \S.*?\s{2,}\S", line)
              and not re.match(r"\s{4,}\S", after)]
    assert not silent, f"python -m {module} --help says nothing of {silent}"


# ----- the checker itself -----

PAGE = """Text with `stream.num_tasks=10` and `model.params.temperature`.

```bash
python -m harness -m model.scripted.accuracy=0.2,0.9
python -m harness model=scripted -m model.scripted.accuracy=0.2,0.9 \\
    hydra.sweep.dir=DIR   # a sweep
python -m harness seed=1   # fails: it does not
python -m harness.view DIR [--port 8000] --colour
```
"""


def test_a_broken_override_is_caught_with_the_page_line_and_hydras_message():
    commands = page_commands_of(PAGE)
    assert [(c.where, c.kind) for c in commands] == [
        ("x.md:4", "shell"), ("x.md:5", "shell"), ("x.md:7", "shell"), ("x.md:8", "shell"),
        ("x.md:1", "overrides"), ("x.md:1", "key")]
    lines = [verdict(c) for c in commands]
    assert lines[0] == ("x.md:4: python -m harness -m model.scripted.accuracy=0.2,0.9: job "
                        "model.scripted.accuracy=0.2: Could not override 'model.scripted.accuracy'. "
                        "(Key 'scripted' is not in struct)")
    assert lines[1] is None and lines[4] is None and lines[5] is None
    assert lines[2].endswith("marked `# fails: it does not`, but it starts")
    assert lines[3].startswith("x.md:8: python -m harness.view DIR [--port 8000] --colour: python -m "
                               "harness.view has no flag --colour")


def page_commands_of(text: str) -> list[Command]:
    return block_commands(text, "x.md") + prose_commands(text, "x.md")


@pytest.mark.parametrize(("span", "message"), [
    ("env=textworld env.settings={level: 5}", "Key 'level' is not in struct"),
    ("env.settings={level: 5}", "Could not override 'env.settings'"),  # in no env's context
    ("stream.num_tasks=0", "invalid config: stream.num_tasks: Input should be greater than 0 (got 0)"),
    ("env=safety stream.num_tasks=500", "invalid config: stream.num_tasks: 500 exceeds the"),
    ("variant.gate=sealed stream.tuning_size=0", "invalid config: variant.gate: the sealed gate audits"),
    ("variant.max_attempts", "is not an override"),
    ("ray.adress=DIR", "no key ray.adress in the config"),
])
def test_what_a_run_refuses_before_it_starts_is_caught(span, message):
    found = harness_problem(hydra_words(span), in_context=True)
    assert found is not None and message in found, found


def test_a_span_in_prose_holds_in_some_option_of_its_group_and_a_key_in_some_option():
    judged = ["variant.select=judge", "variant.judge={}"]
    assert harness_problem(judged, in_context=True) is None  # with best_of_k
    assert "Key 'select' is not in struct" in harness_problem(judged)  # not with the default variant
    assert harness_problem(["variant.select=judge"], in_context=True) == (
        "with variant=best_of_k: invalid config: variant: ValueError: variant.select=judge needs a "
        "variant.judge section")  # the option it got furthest with says why
    assert key_problem("variant.memory.top_k") is None
    assert "+model.params.logprobs=..." in key_problem("model.params.logprobs")


def test_placeholders_are_checked_for_their_key_only():
    words = shlex.split("hydra.run.dir=DIR variant.start_from=outputs/runs/DATE/TIME@final "
                        "ray.address=<head-ip>:6379 ... env=jsonl env.path=tasks.jsonl")
    assert harness_problem(words) is None
    assert "no key variant.start_frm" in harness_problem(["variant.start_frm=DIR@final"])


def test_the_evaluations_values_are_checked_as_it_checks_them():
    assert entry_point_problem("harness.evaluate", ["DIR", "--ood", "env=reasoning_gym", "--set",
                                                    "budget.max_tokens=20000"], "") is None
    assert "no such env" in entry_point_problem("harness.evaluate", ["DIR", "--ood", "env=mars"], "")
    assert "--views: no view odd" in entry_point_problem("harness.evaluate", ["DIR", "--views", "id,odd"], "")
    assert "existing key" in entry_point_problem("harness.evaluate", ["DIR", "--set", "budget.tokens=1"], "")


def test_a_bench_measurement_is_checked_against_its_own_flags():
    assert entry_point_problem("harness.bench", ["sweep", "--jobs", "1", "16", "--warm"], "") is None
    assert entry_point_problem("harness.bench", ["--quick"], "# --skip-local-model") is None
    assert "python -m harness.bench endpoint has no flag --jobs" in entry_point_problem(
        "harness.bench", ["endpoint", "--jobs", "1"], "")
    assert entry_point_problem("harness.bench.sweep", ["--jobs", "1"], "") == (
        "no entry point python -m harness.bench.sweep")
