"""Aggregates across tasks or environments the way rliable does (Agarwal et al. 2021, "Deep RL at the
Edge of the Statistical Precipice"), where a report spans several environments or task families.

Each group's seeds give a score matrix: one row per seed (its order seeds and repeats pooled: they share
its task set; each seed-order with `--unit order`), one column per stratum (an env, or a task family of
one), each cell the seed's success rate there. From it, with rliable's estimators and its stratified
bootstrap (seeds resampled within each stratum: the seed is the unit):
- the interquartile mean (IQM) of the scores, robust to a run or a stratum far from the rest, with a
  95% percentile interval;
- the probability of improvement P(X > Y) of each group over the reference, averaged over strata
  (per stratum the Mann-Whitney count, ties as one half), with a 95% interval;
- performance profiles: the share of run x stratum scores above each threshold, with a 95% band.
rliable itself is not imported: rliable 1.2 needs arch < 8, and arch 7 does not import beside pandas 3
(`deprecate_kwarg() missing 1 required positional argument`, seen 2026-12-02). The estimators are its
formulas (scipy's `trim_mean` for the IQM) and the resampling is vectorised numpy, checked against
rliable's definitions in tests/report/test_aggregate.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.report.compare import NOT_CONTEXT, labelled, references_in, unit_column
from harness.report.stats import LEVEL

STRATA = ("env", "family")
"""Columns whose values are strata (rliable's tasks) when they vary."""
RESAMPLES = 2000
THRESHOLDS = np.linspace(0.0, 1.0, 51)


@dataclass
class Aggregates:
    table: pl.DataFrame
    """Per group: seeds, strata, mean, IQM with its interval, and P(group > reference) with its interval."""
    strata: list[str]
    profiles: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per group: the profile (share of scores above each of THRESHOLDS) and its band (2 x thresholds)."""
    notes: list[str] = field(default_factory=list)


def strata_columns(stream: pl.DataFrame) -> list[str]:
    return [c for c in STRATA if c in stream.columns and stream[c].n_unique() > 1]


def score_matrices(stream: pl.DataFrame, strata: list[str],
                   unit: str = "seed") -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Each group's (units x strata) matrix of success rates over the strata every group has, keeping the
    units (seeds, by `unit`) that have a score in all of them; and notes on what was left out."""
    scored = stream.with_columns(
        stratum=pl.concat_str([pl.col(c).cast(pl.String) for c in strata], separator=" / "),
        run=unit_column(unit))
    per_run = scored.group_by("group", "stratum", "run").agg(score=pl.col("success").cast(pl.Float64).mean())
    shared = sorted(set.intersection(*(set(f["stratum"]) for _, f in per_run.group_by("group"))))
    matrices, notes = {}, []
    kept = per_run.filter(pl.col("stratum").is_in(shared))
    for (group,), frame in kept.group_by("group", maintain_order=True):
        wide = frame.pivot(on="stratum", index="run", values="score").sort("run")
        complete = wide.drop_nulls()
        if complete.height < wide.height:
            notes.append(f"{group}: {wide.height - complete.height} of {wide.height} seeds lack a score in "
                         "some stratum and are left out of the aggregates")
        if complete.height:
            matrices[group] = complete.select(shared).to_numpy()
    return matrices, shared, notes


def aggregates(episodes: pl.DataFrame, keys: list[str], reference: str = "baseline",
               seed: int = 0, unit: str = "seed") -> Aggregates | None:
    """IQM, probability of improvement over `reference` and performance profiles of every group, over the
    strata (envs, task families) the report spans; None where it spans fewer than two."""
    stream = episodes.filter(~pl.col("probe") & pl.col("attempted"))
    strata = strata_columns(stream)
    if not strata:
        return None
    group_keys = [k for k in keys if k not in strata]
    stream = labelled(stream, group_keys)
    matrices, shared, notes = score_matrices(stream, strata, unit)
    if len(shared) < 2 or not matrices:
        return None
    rng = np.random.default_rng(seed)
    iqm = {g: (iqm_of(m[None]), _percentiles(iqm_of(_resample(m, rng)))) for g, m in matrices.items()}
    profiles = {g: (profile_of(m[None])[0], _percentiles(profile_of(_resample(m, rng, RESAMPLES // 2))))
                for g, m in matrices.items()}
    improvement = _improvement(stream, matrices, group_keys, reference, rng, notes)
    rows = []
    for group, matrix in matrices.items():
        row = {"group": group, "seeds": matrix.shape[0], "strata": matrix.shape[1],
               "mean": float(matrix.mean()),
               "iqm": float(iqm[group][0][0]), "iqm_low": float(iqm[group][1][0]),
               "iqm_high": float(iqm[group][1][1])}
        rows.append(row | improvement.get(group, {}))
    return Aggregates(pl.DataFrame(rows, infer_schema_length=None).sort("group"), shared, profiles, notes)


def _resample(matrix: np.ndarray, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """`resamples` copies of a (runs x strata) matrix, its runs drawn with replacement within each stratum
    (rliable's StratifiedBootstrap): shape (resamples, runs, strata)."""
    runs, strata = matrix.shape
    return matrix[rng.integers(0, runs, size=(resamples, runs, strata)), np.arange(strata)]


def _percentiles(estimates: np.ndarray) -> np.ndarray:
    """The 95% percentile interval of bootstrap estimates (resamples first): shape (2, ...)."""
    tail = (1 - LEVEL) / 2 * 100
    return np.percentile(estimates, [tail, 100 - tail], axis=0)


def iqm_of(matrices: np.ndarray) -> np.ndarray:
    """Interquartile mean of each (runs x strata) matrix in a stack: the mean of the middle half of all its
    scores (rliable's `aggregate_iqm`: scipy's 25% trimmed mean)."""
    from scipy.stats import trim_mean

    return np.atleast_1d(trim_mean(matrices.reshape(len(matrices), -1), 0.25, axis=1))


def profile_of(matrices: np.ndarray) -> np.ndarray:
    """Share of each matrix's scores above each of THRESHOLDS (rliable's score distribution)."""
    flat = matrices.reshape(len(matrices), -1)
    return (flat[:, :, None] > THRESHOLDS).mean(axis=1)


def improvement_of(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) for stacks of (runs x strata) matrices: per stratum the share of run pairs in which X's run
    scores above Y's, ties counting one half (the Mann-Whitney U over nx x ny), averaged over strata
    (rliable's `probability_of_improvement`)."""
    above = (x[:, :, None, :] > y[:, None, :, :]).mean(axis=(1, 2))
    ties = (x[:, :, None, :] == y[:, None, :, :]).mean(axis=(1, 2))
    return (above + 0.5 * ties).mean(axis=1)


def _improvement(stream: pl.DataFrame, matrices: dict[str, np.ndarray], keys: list[str], reference: str,
                 rng: np.random.Generator, notes: list[str]) -> dict[str, dict[str, Any]]:
    """P(group > reference) per group, the reference being the group of the same context whose variant (or
    label) is `reference`; both groups' runs resampled independently within each stratum."""
    context = [k for k in keys if k not in NOT_CONTEXT]
    owners = stream.select("group", *keys).unique("group")
    found: dict[str, dict[str, Any]] = {}
    for _, frame in owners.group_by(context or [pl.lit(0)], maintain_order=True):
        groups = frame["group"].to_list()
        references = references_in(frame, reference)
        if len(references) != 1 or references[0] not in matrices:
            continue
        y = matrices[references[0]]
        for group in groups:
            if group == references[0] or group not in matrices:
                continue
            x = matrices[group]
            low, high = _percentiles(improvement_of(_resample(x, rng, RESAMPLES // 2),
                                                    _resample(y, rng, RESAMPLES // 2)))
            point = float(improvement_of(x[None], y[None])[0])
            found[group] = {"reference": references[0], "p_improvement": point,
                            "p_improvement_low": float(low), "p_improvement_high": float(high)}
    if not found:
        notes.append(f"no group {reference!r} with scores in every stratum: no probability of improvement")
    return found


def plot_performance_profiles(result: Aggregates, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for group, (profile, band) in result.profiles.items():
        ax.plot(THRESHOLDS, profile, label=group)
        ax.fill_between(THRESHOLDS, band[0], band[1], alpha=0.2)
    ax.set_xlabel("success rate threshold")
    ax.set_ylabel("share of runs x strata above it (95% band)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def performance_profiles_figure(result: Aggregates) -> Any:
    import plotly.graph_objects as go

    figure = go.Figure()
    x = THRESHOLDS.tolist()
    for group, (profile, band) in result.profiles.items():
        figure.add_trace(go.Scatter(x=x + x[::-1], y=[*band[1], *band[0][::-1]], fill="toself", opacity=0.2,
                                    line={"width": 0}, hoverinfo="skip", name=f"{group}: 95% band"))
        figure.add_trace(go.Scatter(x=x, y=profile.tolist(), mode="lines", name=group))
    figure.update_layout(title="Performance profiles", xaxis_title="success rate threshold",
                         yaxis_title="share of runs x strata above it", height=480)
    return figure
