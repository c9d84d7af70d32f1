"""The report: variants compared from the tables, at matched spend, with CIs and plots."""

import json

import numpy as np
import polars as pl
import pytest

from harness.report.build import main
from harness.report.parts import pareto_front
from harness.report.stats import bootstrap_ci
from harness.tables.writer import TableWriter
from tests.conftest import run_variant


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A two-job sweep directory as the harness writes it (tables and manifest), two seeds each."""
    root = tmp_path_factory.mktemp("sweep")
    for job, variant in enumerate(("baseline", "reflexion")):
        job_dir = root / str(job)
        writer = TableWriter(job_dir, flush_interval_s=0)
        runs = []
        for seed in (0, 1):
            result = run_variant(f"variant={variant}", f"seed={seed}", "stream.num_tasks=10",
                                 "stream.probe_every=5", "stream.probe_size=2")
            for table, rows in result.rows.items():
                writer.append(table, rows)
            runs.append({"run_id": result.rows["episodes"][0]["run_id"], "num_tasks": 10})
        writer.close()
        (job_dir / "manifest.json").write_text(json.dumps({"status": "finished", "agent_runs": runs}))
    return root


def test_the_report_compares_every_variant_and_writes_its_files(sweep, capsys):
    assert main([str(sweep)]) == 0
    printed = capsys.readouterr().out
    assert "| baseline |" in printed and "| reflexion |" in printed
    report = (sweep / "report.md").read_text()
    assert "## Accuracy at matched spend" in report and "## Forgetting on replay probes" in report
    assert "2 run directories, 40 of 40 planned episodes written (finished)" in report
    assert (sweep / "cost_accuracy.png").stat().st_size > 0
    assert (sweep / "learning_curves.png").stat().st_size > 0


def test_the_report_pairs_variants_against_the_reference_and_computes_the_metrics(sweep, tmp_path):
    assert main([str(sweep), "--out", str(tmp_path), "--reference", "reflexion"]) == 0
    report = (tmp_path / "report.md").read_text()
    paired = report[report.index("## Paired differences against reflexion"):]
    assert "| baseline | reflexion | 2 | 2 | 10.000 |" in paired  # 2 paired seeds, 2 runs of 10 tasks
    verdicts = pl.read_parquet(tmp_path / "comparisons.parquet")
    row = verdicts.row(0, named=True)
    assert (row["group"], row["reference"], row["runs"], row["pairs"]) == ("baseline", "reflexion", 2, 20)
    assert {"difference", "ci_low", "ci_high", "p_value", "p_holm", "resolved", "gained", "lost",
            "p_episodes"} <= set(verdicts.columns)
    assert row["resolved"] is False and "2 paired seeds cannot reach p < 0.05" in paired
    metrics = report[report.index("## Self-evolution metrics"):]
    header = next(line for line in metrics.splitlines() if line.startswith("| variant"))
    assert {"forgetting", "success_per_1k_tokens", "std_over_seeds"} <= set(header.strip("| ").split(" | "))


def test_report_html_is_one_offline_page_with_every_section_the_plots_and_the_transcripts(sweep, tmp_path):
    import html
    import re

    assert main([str(sweep), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    markdown_titles = re.findall(r"^## (.+)$", (tmp_path / "report.md").read_text(), re.MULTILINE)
    for title in [*markdown_titles, "Episodes and transcripts"]:
        assert f">{html.escape(title)}</h2>" in page, title
    assert page.count("Plotly.newPlot") == 2  # cost-accuracy, learning curves
    assert re.findall(r"<script[^>]*\bsrc=", page) == []  # nothing fetched: it opens offline
    assert len(re.findall(r"plotly\.js v\d", page)) == 1  # plotly.js inlined once
    assert '"Pareto frontier"' in page and '"reflexion (mean)"' in page
    episodes = pl.read_parquet(list(sweep.glob("*/episodes/*.parquet")))
    assert page.count("(transcripts past") == 0
    for episode in episodes.sample(5, seed=0).iter_rows(named=True):
        assert html.escape(episode["question"]) in page
    transcripts = pl.read_parquet(list(sweep.glob("*/transcripts/*.parquet")))
    assert page.count("<b>reply</b>") == transcripts.height
    assert html.escape(transcripts["messages"][0]) in page


def test_matched_dollars_appear_when_the_calls_have_a_price():
    from harness.report.grouped import matched_spend
    from tests.conftest import run_variant

    run = run_variant("model.price.input_per_token=0.001", "stream.num_tasks=4")
    episodes = pl.DataFrame(run.rows["episodes"])
    budget, table = matched_spend(episodes, "cost_usd")
    assert budget == pytest.approx(episodes["cost_usd"].sum()) and table["episodes"][0] == 4


def test_matched_spend_is_the_smallest_total_any_run_reached(sweep):
    from harness.report.grouped import matched_spend
    from harness.report.loading import find_run_dirs, load

    episodes, _, _ = load(find_run_dirs([sweep]))
    budget, table = matched_spend(episodes)
    totals = episodes.group_by("run_id").agg(pl.col("total_tokens").sum())["total_tokens"]
    assert budget == totals.min()
    baseline = table.filter(pl.col("variant") == "baseline")
    assert baseline["episodes"][0] <= 20


def test_a_directory_without_tables_is_refused(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "holds no harness tables" in capsys.readouterr().err


def test_pareto_front_keeps_only_undominated_points():
    points = [(10, 0.5), (20, 0.6), (30, 0.55), (5, 0.2), (20, 0.4)]
    assert pareto_front(points) == [0, 1, 3]


def test_bootstrap_ci_brackets_the_mean_and_is_degenerate_for_constant_data():
    data = np.array([1.0] * 30 + [0.0] * 70)
    low, high = bootstrap_ci(data)
    assert low < 0.3 < high and high - low < 0.25
    assert bootstrap_ci(np.ones(10)) == (1.0, 1.0)


@pytest.mark.parametrize("jobs,labels", [
    ((("variant=reflexion", "variant.max_attempts=1"), ("variant=reflexion", "variant.max_attempts=3")),
     ["variant.max_attempts=1", "variant.max_attempts=3"]),
    ((("model.scripted.accuracy=0.2",), ("model.scripted.accuracy=0.9",)),
     ["model.scripted.accuracy=0.2", "model.scripted.accuracy=0.9"]),
])
def test_runs_that_differ_in_a_swept_setting_are_never_merged(tmp_path, capsys, jobs, labels):
    from tests.tables.test_summary import sweep as write_sweep

    write_sweep(tmp_path, *jobs)
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    variant = "reflexion" if "reflexion" in jobs[0][0] else "baseline"
    assert all(f"| {variant} | {label} | 1 | 1 | 6 |" in printed for label in labels)  # seeds, runs, episodes
    report = (tmp_path / "report.md").read_text()
    runs = report[report.index("## Runs"):]
    assert all(f"| finished | {label} | 6 | 6 |" in runs for label in labels)


def test_older_run_directories_without_a_runs_table_are_grouped_by_variant(tmp_path, capsys):
    import shutil

    from tests.tables.test_summary import sweep as write_sweep

    for directory in write_sweep(tmp_path, ("variant=reflexion", "variant.max_attempts=1"),
                                 ("variant=reflexion", "variant.max_attempts=3")):
        shutil.rmtree(directory / "runs")
    assert main([str(tmp_path)]) == 0
    assert "| reflexion | 1 | 2 | 12 |" in capsys.readouterr().out  # one seed, its two runs together


def test_a_run_without_episodes_yet_is_refused_in_one_line(tmp_path, capsys):
    TableWriter(tmp_path, flush_interval_s=0).close()  # every table exists, with no rows
    assert main([str(tmp_path)]) == 2
    assert "no episodes written yet" in capsys.readouterr().err


@pytest.mark.slow
def test_help_describes_the_harness():
    """`python -m harness --help` (conf/hydra/help/harness.yaml; selected here on the command line
    in case conf/config.yaml does not select it)."""
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([sys.executable, "-m", "harness", "--help", "hydra/help=harness"],
                            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("harness: a Ray-based benchmark harness for self-evolving LLM agents")
    conf = Path(__file__).resolve().parents[2] / "conf"
    variants = ", ".join(sorted(p.stem for p in (conf / "variant").glob("*.yaml")))
    assert f"variant: {variants}" in text and "model: litellm, scripted, smollm2" in text
    for needle in ("== Useful overrides ==", "model=scripted", "-m model.scripted.accuracy=0.2,0.9",
                   "outputs/runs/DATE/TIME/", "hydra.run.dir=DIR", "python -m harness.report DIR",
                   "python -m harness.evaluate DIR", "variant.start_from=DIR@final"):
        assert needle in text, needle


def episodes_frame(costs: dict[str, list[float | None]]) -> pl.DataFrame:
    """Attempted stream episodes of one seed per variant, with these costs."""
    rows = [{"episode_id": f"{variant}-{i}", "run_id": variant, "variant": variant, "seed": 0, "model": "m",
             "probe": False, "attempted": True, "success": i % 2 == 0, "act_tokens": 10,
             "overhead_tokens": 5, "total_tokens": 15, "cost_usd": cost, "latency_s": 0.1,
             "protocol": "single"}
            for variant, values in costs.items() for i, cost in enumerate(values)]
    return pl.DataFrame(rows, schema_overrides={"cost_usd": pl.Float64})


def test_a_group_with_an_unknown_cost_shows_its_dollars_as_unknown_not_understated():
    from harness.report.grouped import main_table

    table = main_table(episodes_frame({"priced": [0.5, 0.25], "unpriced": [0.5, None]}))
    assert dict(table.select("variant", "cost_usd").iter_rows()) == {"priced": 0.75, "unpriced": None}


def test_tokens_by_purpose_follow_the_registry_and_keep_a_purpose_it_does_not_know():
    from harness.report.mechanism_sections import purpose_section
    from harness.tables.records import PURPOSES

    episodes = episodes_frame({"baseline": [0.0]})
    calls = pl.DataFrame({"episode_id": ["baseline-0"] * 3, "purpose": ["reflect", "act", "daydream"],
                          "total_tokens": [20, 70, 10]})
    section = purpose_section(episodes, calls)
    assert section is not None and section.table is not None
    assert "daydream" not in PURPOSES
    assert section.table.columns == ["variant", "act", "reflect", "daydream"]
    assert section.table.row(0) == ("baseline", 0.7, 0.2, 0.1)


def test_grading_is_said_apart_also_when_the_agent_has_one_purpose():
    """A judge-scored baseline (act, and the benchmark's grade calls): grading is said in a note, never a
    share of the agent's tokens."""
    from harness.report.mechanism_sections import purpose_section

    episodes = episodes_frame({"baseline": [0.0]})
    calls = pl.DataFrame({"episode_id": ["baseline-0"] * 2, "purpose": ["act", "grade"],
                          "total_tokens": [70, 30]})
    section = purpose_section(episodes, calls)
    assert section is not None and section.table is not None
    assert section.table.columns == ["variant", "act"] and section.table.row(0) == ("baseline", 1.0)
    assert any("30 tokens" in note for note in section.notes)
    assert purpose_section(episodes, calls.filter(pl.col("purpose") == "act")) is None


def test_self_edit_counts_come_from_the_tables_registry():
    from harness.report.mechanism_sections import EDIT_COUNTS
    from harness.tables.records import TABLES

    assert EDIT_COUNTS and all(TABLES[table].edit_counts == counts for table, counts in EDIT_COUNTS.items())
    assert {"memory_events", "gate_events", "safety_events"} <= set(EDIT_COUNTS)


def test_report_html_shows_the_reports_bold_as_bold_as_the_viewer_does():
    from harness.report.html import prose

    said = prose("**Cost unknown for 2 of 5 model calls** (`openai/x`: no price known) & more")
    assert said == ("<b>Cost unknown for 2 of 5 model calls</b> (<code>openai/x</code>: no price known) "
                    "&amp; more")


def test_comparisons_parquet_has_the_documented_columns_in_order(sweep, tmp_path):
    from pathlib import Path

    from harness.report.compare import COMPARISON_COLUMNS

    assert main([str(sweep), "--out", str(tmp_path), "--reference", "reflexion"]) == 0
    assert pl.read_parquet(tmp_path / "comparisons.parquet").columns == list(COMPARISON_COLUMNS)
    page = (Path(__file__).resolve().parents[2] / "docs" / "columns.md").read_text()
    documented = page[page.index("## comparisons.parquet"):]
    assert all(f"| `{column}` | {meaning} |" in documented for column, meaning in COMPARISON_COLUMNS.items())


@pytest.mark.slow
def test_identical_agents_with_copied_repeats_never_resolve_through_the_whole_pipeline(tmp_path):
    """Two arms of one known-truth agent (harness/bench/calibration.py), 3 seeds x 3 repeats: its repeats
    are copies (its outcomes hang on its arm, seed and question only), so counted as runs they would be 9
    units. The report counts 3 seeds, cannot resolve, and says how many seeds would."""
    from harness.bench.calibration import write_tasks
    from tests.processes import run_cli

    write_tasks(tmp_path / "tasks.jsonl", count=40)
    sweep = tmp_path / "sweep"
    result = run_cli("-m", "variant=external", "variant.entry=harness.bench.calibration:KnownTruthAgent",
                     "variant.options={arm:a,sd:1.0},{arm:b,sd:1.0}", "env=jsonl",
                     f"env.path={tmp_path / 'tasks.jsonl'}", "seeds=[0,1,2]", "stream.repeats=3",
                     "stream.num_tasks=20", "model=scripted", "embedder=hashing", "cache.enabled=false",
                     "progress=false", "ray.include_dashboard=false", f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert main([str(sweep), "--reference", "external / variant.options.arm=a"]) == 0
    row = pl.read_parquet(sweep / "comparisons.parquet").row(0, named=True)
    assert (row["runs"], row["seeds"], row["repeats"], row["units"]) == (9, 3, 3, 3)
    assert row["noise_floor"] == 0.0 and row["resolved"] is False and row["smallest_p"] >= 0.25
    report = (sweep / "report.md").read_text()
    plan = next(line for line in report.splitlines() if line.startswith("- external / variant.options.arm=b"))
    assert "3 paired seeds cannot reach p < 0.05 whatever they show" in plan
    # how many would: 60 episodes a seed (20 tasks x 3 copies), however the pilot's difference came out
    assert "paired seeds of 60 episodes" in plan
