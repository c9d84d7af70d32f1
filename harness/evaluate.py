"""`python -m harness.evaluate <run or sweep dir> [...]`: evaluate snapshots frozen, on held-out views.

For every agent run below the given directories and each chosen snapshot of it (`--snapshots`:
final, all, or positions such as 10,20), an agent is built from the snapshot with learning off (no
tuning, nothing learnt after a task) and run on each view (`--views`):
- `id`: held-out tasks of the same distribution: the env's evaluation pool less the source run's
  own stream (and its tuning split), `--tasks` of them drawn with the run's seed, so runs that
  share a seed (every variant of a sweep) are evaluated on the same tasks;
- `ood`: tasks of another family or environment, named by `--ood` (env overrides such as
  `"env.families=[demonym]"`, or `"env=reasoning_gym"` for another env), drawn the same way;
- `replay`: the source run's own earlier tasks (those before the snapshot position), up to
  `--tasks` of them in stream order.
All of it runs as one job on Ray with the source's model, cache and budget settings, into
`--out` (default `<first dir>/evaluations/<date>_<time>`), whose tables are those of any run;
episodes carry `view`, `snapshot_of` and `snapshot_position`. The same `--out` resumes it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from envs.base import Task
from harness import extras
from harness.agent_run.plan import build_plan
from harness.agent_run.spec import AgentRunSpec
from harness.agent_run.streams import sample_tasks, show_for_seed
from harness.agent_run.tasks import env_families, resolve_defaults, task_pool
from harness.config import CONF_DIR, Component, ConfigError, HarnessConfig, compose_conf, endpoint_key
from harness.errors import one_line
from harness.exit_codes import EXPECTED_ERRORS, exit_for
from harness.tables.reading import read_table
from harness.tables.records import SnapshotRow

VIEWS = ("id", "ood", "replay")


def source_dirs(paths: list[Path]) -> list[Path]:
    """Run directories below `paths` that hold snapshots (evaluation outputs never do)."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ConfigError(f"{path}: no such directory")
        here = sorted({p.parent.parent.resolve() for p in path.rglob(f"{SnapshotRow.table}/*.parquet")
                       if (p.parent.parent / "manifest.json").exists()})
        here = [d for d in here if not read_table(d, SnapshotRow.table).is_empty()]
        if not here:
            raise ConfigError(f"{path}: holds no snapshots (runs write them at the end of their stream and "
                              "every stream.snapshot_every tasks)")
        found += here
    return found


def source_settings(run_dir: Path) -> HarnessConfig:
    """The job's resolved config, less what belonged to how it ran: a sweep job's shared limits
    actor (gone with its sweep) and its progress setting."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = {k: v for k, v in manifest["config"].items() if k not in ("hydra", "sweep")}
    config["ray"] = {**config["ray"], "limits": None}
    config["progress"] = True
    return HarnessConfig.validate_dict(config)


def ood_env(settings: HarnessConfig, overrides: str) -> Component:
    """The source's env config with `--ood` applied: `env=<name>` picks conf/env/<name>.yaml, and
    `env.<key>=<value>` items change its options (values in YAML, e.g. [demonym])."""
    items = overrides.split()
    base: Any = OmegaConf.create(settings.env.model_dump(by_alias=True))
    dotted: list[str] = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not (key == "env" or key.startswith("env.")):
            raise ConfigError(f"invalid --ood: {item!r}; give env=<name> and/or env.<option>=<value>")
        if key == "env":
            path = CONF_DIR / "env" / f"{value}.yaml"
            if not path.exists():
                names = ", ".join(sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml")))
                raise ConfigError(f"invalid --ood: env={value}: no such env (choose from {names})")
            base = composed_env(value, settings.seed)
        else:
            dotted.append(f"{key.removeprefix('env.')}={value}")
    merged = OmegaConf.merge(base, OmegaConf.from_dotlist(dotted))
    cfg = OmegaConf.to_container(merged, resolve=True)
    assert isinstance(cfg, dict)
    try:
        return Component.model_validate({str(k): v for k, v in cfg.items()})
    except ValueError as error:
        raise ConfigError(f"invalid --ood: {one_line(error)}") from None


def composed_env(name: str, seed: int) -> Any:
    """conf/env/<name>.yaml as a run composes it: a preset with its defaults (env=gsm8k on
    env=dataset), `${seed}` the job's."""
    cfg = compose_conf(f"env={name}", f"seed={seed}")
    return OmegaConf.create(OmegaConf.to_container(cfg.env, resolve=True))


def draw(tasks: list[Task], count: int, seed: int) -> list[Task]:
    """Up to `count` of `tasks`, drawn as a stream draws its own (the same seed, the same tasks)."""
    return sample_tasks(tasks, min(count, len(tasks)), seed)


def plan_evaluation(paths: list[Path], out: Path, views: list[str], snapshots: str, count: int,
                    ood: str | None) -> tuple[HarnessConfig, list[AgentRunSpec]]:
    unknown = sorted(set(views) - set(VIEWS))
    if unknown or not views:
        given = ",".join(unknown) or "none given"
        raise ConfigError(f"invalid --views: {given}; choose from {', '.join(VIEWS)}")
    if "ood" in views and not ood:
        raise ConfigError('invalid --views: ood needs --ood, e.g. --ood "env.families=[demonym]" or '
                          '--ood "env=reasoning_gym"')
    if count < 1:
        raise ConfigError(f"invalid --tasks: {count}; at least 1")
    specs: list[AgentRunSpec] = []
    first: HarnessConfig | None = None
    for run_dir in source_dirs(paths):
        settings = source_settings(run_dir)
        if first is None:
            first = settings
        elif [endpoint_key(first.model), endpoint_key(first.embedder)] != [
                endpoint_key(settings.model), endpoint_key(settings.embedder)]:
            raise ConfigError(f"{run_dir}: uses another model or embedder than {paths[0]}; evaluate the "
                              "runs of one model at a time")
        specs += _evaluations(settings, run_dir, out, views, snapshots, count, ood)
    assert first is not None
    return first, specs


def _evaluations(settings: HarnessConfig, run_dir: Path, out: Path, views: list[str], snapshots: str,
                 count: int, ood: str | None) -> list[AgentRunSpec]:
    import polars as pl

    table = read_table(run_dir, SnapshotRow.table)
    planned = resolve_defaults(settings)[1]
    ood_component = ood_env(settings, ood) if ood and "ood" in views else None
    ood_cfg = env_families(ood_component, settings.stream.scenario).instantiable() if ood_component else None
    ood_tasks = task_pool(ood_cfg, 0) if ood_cfg else None
    specs = []
    for source in build_plan(settings, run_dir):
        mine = table.filter(pl.col("run_id") == source.run_id)
        if snapshots == "final":
            mine = mine.filter(pl.col("final"))
        elif snapshots != "all":
            try:
                wanted = {int(p) for p in snapshots.split(",")}
            except ValueError:
                raise ConfigError(f"invalid --snapshots: {snapshots!r}; final, all or positions "
                                  "such as 10,20") from None
            mine = mine.filter(pl.col("position").is_in(sorted(wanted)))
        own = {t.task_id for t in source.tasks} | {t.task_id for t in source.tuning_tasks}
        unseen = [t for t in planned.evaluation if t.task_id not in own]
        held_out = show_for_seed(planned.env, draw(unseen, count, source.seed), source.seed)
        for snapshot in mine.unique("position").sort("position").iter_rows(named=True):
            position = snapshot["position"]
            for view in views:
                update: dict[str, Any] = {}
                if view == "id":
                    tasks = held_out
                elif view == "replay":
                    earlier = source.tasks[:position]
                    keep = set(map(id, draw(earlier, count, source.seed)))
                    tasks = [t for t in earlier if id(t) in keep]
                else:
                    assert ood_component is not None and ood_tasks is not None
                    unseen = [t for t in ood_tasks.evaluation if t.task_id not in own]
                    tasks = show_for_seed(ood_tasks.env, draw(unseen, count, source.seed), source.seed)
                    update = {"env": ood_component.name, "env_cfg": ood_cfg}
                if not tasks:
                    raise ConfigError(f"invalid --views: {view}: no tasks left for {source.run_id} at "
                                      f"position {position}")
                specs.append(source.model_copy(update={
                    "run_id": f"{source.run_id}.at{position}.{view}", "tasks": tasks, "frozen": True,
                    "view": view, "start_from": str(run_dir / snapshot["path"]), "snapshot_of": source.run_id,
                    "snapshot_position": position, "probe_every": 0, "workdir": str(out),
                    **update}))
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.evaluate", description=" ".join(
        __doc__.split("\n\n")[0].split()))  # the docstring's first paragraph: a whole sentence
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep directories holding snapshots")
    parser.add_argument("--views", default="id", help="comma-separated: id, ood, replay (default: id)")
    parser.add_argument("--snapshots", default="final", help="final (default), all, or positions: 10,20")
    parser.add_argument("--tasks", type=int, default=20, help="tasks per view and agent run (default 20)")
    parser.add_argument("--ood", default=None, help='env overrides for view ood: "env.families=[demonym]" '
                        'or "env=reasoning_gym"')
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: <first "
                        "dir>/evaluations/<date>_<time>; give an earlier one to resume it)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change a setting of the evaluation job, e.g. ray.num_workers=1, "
                        "progress=false, budget.max_tokens=20000 (repeatable)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out = args.out or args.paths[0] / "evaluations" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    try:
        settings, specs = plan_evaluation(args.paths, out.resolve(), args.views.split(","), args.snapshots,
                                          args.tasks, args.ood)
        settings = _with_changes(settings, args.set)
        extras.check(settings)
        specs = [s.model_copy(update={"budget": settings.budget, "cache": settings.cache}) for s in specs]
        from harness.driver.run import print_summary, run_specs  # Ray loads only for a valid plan

        print(f"evaluating {len(specs)} snapshot x view runs into {out}", flush=True)
        again = [*(argv if argv is not None else sys.argv[1:]), *([] if args.out else ["--out", str(out)])]
        result = run_specs(settings, specs, out.resolve(), settings.model_dump(by_alias=True, mode="json"),
                           resume_command=["python", "-m", "harness.evaluate", *again])
    except EXPECTED_ERRORS as error:
        return exit_for(error).code
    print_summary(result, started)
    return 0


def _with_changes(settings: HarnessConfig, changes: list[str]) -> HarnessConfig:
    dumped = OmegaConf.create(settings.model_dump(by_alias=True, mode="json"))
    for change in changes:
        key, eq, _ = change.partition("=")
        if not eq or OmegaConf.select(dumped, key, default=KeyError) is KeyError:
            raise ConfigError(f"invalid --set: {change!r}; give KEY=VALUE with an existing key")
    merged = OmegaConf.merge(dumped, OmegaConf.from_dotlist(changes))
    container = OmegaConf.to_container(merged, resolve=True)
    assert isinstance(container, dict)
    return HarnessConfig.validate_dict({str(k): v for k, v in container.items()})


if __name__ == "__main__":
    from harness.driver.startup import end_without_collecting

    end_without_collecting()
    sys.exit(main())
