"""Resume: carry on a job in its own directory without losing or repeating a row.

Planned once, under the run directory's lock, before anything starts: a crashed writer's leftovers
are finished (harness/tables/writer.py `recover`), the rows of unfinished episodes set aside
(harness/tables/orphans.py), and each agent run that has unfinished episodes is re-run from the
start: its finished episodes are replayed to rebuild the agent's state (memory, tools, prompt)
without being written again, and the rest are run and written. With the response cache on (the
default), the replayed greedy calls are answered from disk, so they send nothing to the model.
What to tell the user to type to carry on (`resume_hint`) is said here too: every stage that can stop
a run says it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from harness.agent_run.spec import AgentRunSpec, episode_ids
from harness.config import ConfigError
from harness.tables.orphans import described_runs, drop_orphans, finished_episodes
from harness.tables.writer import recover


@dataclass(frozen=True)
class ResumePlan:
    left: dict[str, int]
    """Per agent run, the episodes it has still to write (all of them in a fresh directory)."""
    finished: dict[str, list[str]] = field(default_factory=dict)
    """Per agent run, the episodes an earlier run of the job already wrote: replayed, not written again."""
    resumes: int = 0
    """How many times the directory has now been resumed (0: a fresh directory)."""
    described_runs: frozenset[str] = field(default_factory=frozenset)
    """Agent runs the `runs` table already describes: a resume writes no second row for them."""


def plan_resume(specs: list[AgentRunSpec], run_dir: Path) -> ResumePlan:
    """The plan of a job in `run_dir`: a fresh one, or a resume of the episodes it already holds."""
    planned = {spec.run_id: episode_ids(spec) for spec in specs}
    recover(run_dir)  # a compaction a crash cut short must not show its rows twice
    finished = finished_episodes(run_dir)
    if finished and not finished & {eid for ids in planned.values() for eid in ids}:
        raise ConfigError(f"invalid config: {run_dir} holds episodes of other runs (a different config); "
                          "resume with the config that wrote them, or choose a new directory")
    # Also when no episode finished: a run stopped during its first episodes leaves their calls.
    dropped = drop_orphans(run_dir, finished)
    # Also with nothing finished or dropped: a run stopped before its first episode has its runs rows.
    described = described_runs(run_dir)
    written = {run_id: sorted(done) for run_id, ids in planned.items() if (done := set(ids) & finished)}
    left = {run_id: len(ids) - len(written.get(run_id, ())) for run_id, ids in planned.items()}
    if not finished and not dropped:
        return ResumePlan(left, described_runs=described)
    removed = f"; {dropped} rows of unfinished episodes removed" if dropped else ""
    print(f"resuming in {run_dir}: {sum(map(len, written.values()))} episodes already written, "
          f"{sum(left.values())} to go{removed}", flush=True)
    previous = run_dir / "manifest.json"
    resumes = json.loads(previous.read_text()).get("resumes", 0) + 1 if previous.exists() else 1
    return ResumePlan(left, written, resumes, described)


def resume_hint(directory: Path, command: list[str] | None = None, sweep: bool = False,
                overrides: Sequence[str] | None = None) -> str:
    """What to type to carry on: `command` when the entry point gave one (a snapshot evaluation),
    else the same Hydra overrides (`overrides`: a sweep's, as typed; else the job's), into the same
    run (or sweep) directory."""
    if command is not None and not sweep:
        return f"the episodes written so far are kept; resume with: {shlex.join(command)}"
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    if overrides is None:
        overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    overrides = [o for o in overrides if not o.startswith((f"{key}=", "ray.limits=", "progress="))]
    # Where configs were found (a variant of one's own, an outside agent's): without it the
    # resumed command could not compose the same config.
    composing = HydraConfig.get().overrides.hydra if HydraConfig.initialized() else []
    overrides = [*overrides, *(o for o in composing if o.startswith("hydra.searchpath="))]
    sweeping = ["-m"] if sweep else []
    again = shlex.join(["python", "-m", "harness", *sweeping, *overrides, f"{key}={directory}"])
    return f"the episodes written so far are kept; resume with: {again}"
