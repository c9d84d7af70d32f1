"""`seeds=until_decided`: a sweep that adds seeds, round by round, until its comparisons are decided.

`python -m harness -m variant=baseline,memory seeds=until_decided` runs the sweep's jobs with seeds
[seed, seed + batch), then, on the same pool, with `batch` more, and so on. After each round the jobs' tables
are read back and every job's group is compared with the reference's (the first value of the swept
parameter, or `sweep.until_decided.reference`) by the report's own `paired_comparisons` with the anytime-valid
test (harness/report/sequential.py): a comparison whose confidence sequence excludes 0 (Holm across the
comparisons, as the report does) is decided, better or worse, and its job gets no more seeds; the sweep
stops when every comparison is decided or `max_seeds` seeds are spent. A job's later round is a resume of
its directory with more seeds (harness/driver/resume.py): the seeds it ran are not run again. So a sweep
stopped mid-way and run again with the same command and `hydra.sweep.dir` replays its rounds from the
tables it wrote, reaching the decisions it had reached, and goes on. What each round saw is written to the
sweep directory's `until_decided.json`, which also tells `python -m harness.report` that the sweep's
verdicts are the sequential test's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, open_dict
from pydantic import Field, ValidationError

from harness.config import ConfigError, _Strict, _validation_message
from harness.files import replace_atomically
from harness.report.sequential import SEQUENTIAL_STATE

log = logging.getLogger(__name__)

UNTIL_DECIDED = "until_decided"


class UntilDecided(_Strict):
    """`sweep.until_decided` in conf/config.yaml."""

    batch: int = Field(ge=1)
    max_seeds: int = Field(ge=2)
    alpha: float = Field(gt=0, lt=1)
    reference: str | None
    """A value of the swept parameter (`baseline`); null: its first value."""


def wanted(config: DictConfig) -> bool:
    """Whether a job's composed config asks for seeds until decided."""
    return config.get("seeds") == UNTIL_DECIDED


def first_round(config: DictConfig) -> bool:
    """Give a job that asks for seeds=until_decided its first round's seeds, in place (the sweep launcher as
    it composes each job; later rounds add to them); whether it asked."""
    if not wanted(config):
        return False
    with open_dict(config):
        config.seeds = list(range(config.seed, config.seed + settings_of(config).batch))
    return True


def settings_of(config: DictConfig) -> UntilDecided:
    from omegaconf import OmegaConf

    try:
        return UntilDecided.model_validate(OmegaConf.to_container(config.sweep.until_decided, resolve=True))
    except ValidationError as error:
        raise ConfigError(_validation_message(error).replace("invalid config: ", "invalid config: "
                                                             "sweep.until_decided.")) from None


def swept_values(job_overrides: Sequence[Sequence[str]]) -> tuple[str, list[str]]:
    """The one parameter the sweep's jobs differ in, and each job's value of it."""
    parsed = [dict(o.split("=", 1) for o in overrides if "=" in o) for overrides in job_overrides]
    keys = sorted({k for job in parsed for k in job if len({j.get(k) for j in parsed}) > 1})
    if len(parsed) < 2 or len(keys) != 1:
        varies = f"it varies {len(keys)} ({', '.join(keys)})" if keys else "its jobs do not differ"
        raise ConfigError(f"invalid config: seeds=until_decided compares the values of one swept parameter "
                          f"(-m variant=baseline,memory seeds=until_decided); {varies}")
    return keys[0], [job[keys[0]] for job in parsed]


@dataclass
class Rounds:
    """The rounds of one sweep: which jobs still run, and what each round decided."""

    settings: UntilDecided
    parameter: str
    values: list[str]
    first_seed: int
    sweep_dir: Path
    reference_group: str | None = None
    """The reference's row label in the report (`baseline / model.scripted.accuracy=0.2`)."""
    decided: dict[str, dict] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, config: DictConfig, job_overrides: Sequence[Sequence[str]], sweep_dir: Path) -> Rounds:
        settings = settings_of(config)
        parameter, values = swept_values(job_overrides)
        reference = settings.reference if settings.reference is not None else values[0]
        if reference not in values:
            raise ConfigError(f"invalid config: sweep.until_decided.reference={reference!r} is not a value "
                              f"of {parameter} ({', '.join(values)})")
        settings = settings.model_copy(update={"reference": reference})
        return cls(settings, parameter, values, int(config.seed), sweep_dir)

    def seeds(self, round_index: int) -> list[int]:
        upto = min((round_index + 1) * self.settings.batch, self.settings.max_seeds)
        return list(range(self.first_seed, self.first_seed + upto))

    def run(self, configs: list[DictConfig], run_jobs: Callable[[list[DictConfig]], list[JobReturn]]
            ) -> list[JobReturn]:
        """Run round after round (each a call of `run_jobs` on the jobs still undecided and the reference)
        until every comparison is decided or the most seeds are spent; the last result of every job."""
        latest: dict[int, JobReturn] = {}
        round_index = 0
        while True:
            seeds = self.seeds(round_index)
            running = [i for i, value in enumerate(self.values)
                       if value == self.settings.reference or value not in self.decided]
            for index in running:
                with open_dict(configs[index]):
                    configs[index].seeds = seeds
            log.info(f"seeds=until_decided, round {round_index + 1}: seeds {seeds[0]}-{seeds[-1]} for "
                     f"{', '.join(self.values[i] for i in running)}")
            for index, result in zip(running, run_jobs([configs[i] for i in running]), strict=True):
                latest[index] = result
            if any(latest[i].status == JobStatus.FAILED for i in running):
                return [latest[i] for i in sorted(latest)]  # a failed job: its line says why; no verdict
            self.look(configs, seeds)
            undecided = [v for v in self.values if v != self.settings.reference and v not in self.decided]
            if not undecided or len(seeds) >= self.settings.max_seeds:
                self.finish(undecided, len(seeds))
                return [latest[i] for i in sorted(latest)]
            round_index += 1

    def look(self, configs: list[DictConfig], seeds: list[int]) -> None:
        """Compare every job with the reference over this round's seeds, as the report will (its own
        `comparisons_of`, sequential); record what is decided. A resumed sweep's tables may hold later
        rounds' seeds already: each round looks at its own, so it decides what it decided before."""
        import polars as pl

        from harness.report.compare import labelled
        from harness.report.grouped import comparisons_of
        from harness.report.parts import REPORT_GROUPS
        from harness.tables.reading import concat_tables, read_table, read_tables
        from harness.tables.summary import group_keys, label_runs

        job_dirs = [Path(str(c.hydra.sweep.dir)) / str(c.hydra.sweep.subdir) for c in configs]
        per_job = [read_table(job_dir, "episodes") for job_dir in job_dirs]  # each read once a round
        episodes = label_runs(concat_tables(per_job), read_tables(job_dirs, "runs"))  # as the report does
        episodes = episodes.filter(pl.col("seed").is_in(seeds))
        groups = labelled(episodes, group_keys(episodes, REPORT_GROUPS)).select("run_id", "group").unique()
        value_of = {}
        for value, job_episodes in zip(self.values, per_job, strict=True):
            runs = job_episodes["run_id"].unique().to_list()
            labels = groups.filter(pl.col("run_id").is_in(runs))["group"].to_list()
            value_of.update(dict.fromkeys(labels, value))
        self.reference_group = next(g for g, v in value_of.items() if v == self.settings.reference)
        verdicts = {}
        compared = comparisons_of(episodes, self.reference_group, sequential=self.settings.alpha)
        for row in compared.table.iter_rows(named=True):
            value = value_of[row["group"]]
            decision = ("better" if row["difference"] > 0 else "worse") if row["resolved"] else "go on"
            verdicts[value] = {"decision": decision, "seeds": row["units"], "difference": row["difference"],
                               "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_value": row["p_value"],
                               "p_holm": row["p_holm"]}
            if row["resolved"] and value not in self.decided:
                self.decided[value] = verdicts[value]
                log.info(f"{self.parameter}={value}: decided {decision} than {self.settings.reference} after "
                         f"{row['units']} seeds [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], always-valid "
                         f"p {row['p_value']:.3g}")
        self.history.append({"seeds": len(seeds), "verdicts": verdicts})
        self.write(stopped=None)

    def finish(self, undecided: list[str], seeds: int) -> None:
        for value in undecided:
            log.info(f"{self.parameter}={value}: not decided after {seeds} seeds (sweep.until_decided."
                     f"max_seeds={self.settings.max_seeds}); its confidence sequence still holds 0")
        why = "every comparison decided" if not undecided else "max_seeds spent"
        self.write(stopped=why)
        log.info(f"seeds=until_decided stopped ({why}) after {seeds} seeds; what each round decided: "
                 f"{self.sweep_dir / SEQUENTIAL_STATE}")

    def write(self, stopped: str | None) -> None:
        state = {"parameter": self.parameter, "values": self.values, **self.settings.model_dump(),
                 "reference_group": self.reference_group,
                 "decided": self.decided, "rounds": self.history, "stopped": stopped}
        replace_atomically(self.sweep_dir / SEQUENTIAL_STATE,
                           lambda path: Path(path).write_text(json.dumps(state, indent=2) + "\n"))
