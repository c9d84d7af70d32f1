"""The viewer (python -m harness.view) over a small sweep written as the harness writes it: its JSON and
HTML endpoints against the tables, bad input as a one-line 404/400, part files landing while it runs;
then the same pages in a real browser (Playwright driving chromium), with screenshots."""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

from harness.agent_run.plan import build_plan
from harness.bench.synthetic_sweep import generate
from harness.bench.viewer_speed import measure
from harness.report.grouped import main_table
from harness.tables.reading import read_tables
from harness.tables.records import RunRow
from harness.tables.summary import label_runs
from harness.tables.writer import TableWriter
from harness.view import part_chunks
from harness.view import queries as view_queries
from harness.view.app import main, serve, url_of
from harness.view.queries import EpisodeFilter, list_episodes, runs_overview
from harness.view.store import Store
from tests import tiers
from tests.conftest import run_variant, scripted_settings

JOBS = {
    "memory": ("variant=memory", "variant.gate=sealed", "variant.probe_size=4", "stream.tuning_size=8",
               "variant.safety={policy: flag}"),
    "playbook": ("variant=playbook",),
    "baseline": ("variant=baseline",),
}
"""One job per variant: memory with the sealed gate and a flagging safety check (every table of learnt
state has rows), playbook bullets, and a baseline that learns nothing."""
COMMON = ("stream.num_tasks=8", "model.scripted.accuracy=0.5")


@dataclass
class Sweep:
    root: Path
    rows: dict[str, dict[str, list[dict[str, Any]]]]
    """Per variant, the rows written per table."""
    run_ids: dict[str, str]
    url: str

    def table(self, name: str) -> pl.DataFrame:
        return read_tables(sorted(p for p in self.root.iterdir() if p.is_dir()), name)


def write_job(job_dir: Path, overrides: tuple[str, ...], job: int, rows: dict[str, list[dict[str, Any]]],
              status: str = "finished", close: bool = True) -> TableWriter:
    """A job directory as the harness leaves it: the tables, the runs row and manifest.json."""
    settings = scripted_settings(*overrides)
    spec = build_plan(settings, job_dir)[0]
    writer = TableWriter(job_dir, flush_interval_s=0)
    for table, table_rows in rows.items():
        writer.append(table, table_rows)
    writer.append(RunRow.table, [RunRow(
        run_id=spec.run_id, variant=spec.variant, env=spec.env, seed=spec.seed, order_seed=spec.order_seed,
        scenario=spec.scenario, model=spec.model, job=job, overrides=" ".join(overrides),
        model_params=json.dumps(settings.model.requested_params, sort_keys=True),
        settings=json.dumps(spec.settings, sort_keys=True), started_at=dt.datetime.now(dt.UTC)).model_dump()])
    writer.flush()
    if close:
        writer.close()
    (job_dir / "manifest.json").write_text(json.dumps({"status": status, "agent_runs": [
        {"run_id": spec.run_id, "variant": spec.variant, "seed": spec.seed, "env": spec.env,
         "num_tasks": len(spec.tasks)}]}))
    return writer


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Iterator[Sweep]:
    root = tmp_path_factory.mktemp("sweep")
    rows, run_ids = {}, {}
    for job, (variant, overrides) in enumerate(JOBS.items()):
        overrides = (*overrides, *COMMON)
        rows[variant] = run_variant(*overrides).rows
        run_ids[variant] = rows[variant]["episodes"][0]["run_id"]
        write_job(root / str(job), overrides, job, rows[variant])
    (root / "multirun.yaml").write_text("hydra: {}\n")
    server = serve([root], port=0)
    yield Sweep(root, rows, run_ids, url_of(server))
    server.shutdown()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def get_json(url: str) -> Any:
    status, body = get(url)
    assert status == 200, body
    return json.loads(body)


# Plain HTTP ---------------------------------------------------------------------------------------

def test_the_runs_page_counts_what_each_run_wrote(sweep):
    jobs = get_json(sweep.url + "api/runs")
    assert [j["dir"] for j in jobs] == ["0", "1", "2"]
    for job, variant in zip(jobs, JOBS, strict=True):
        (run,) = job["runs"]
        episodes = sweep.rows[variant]["episodes"]
        assert job["status"] == "finished" and run["run_id"] == sweep.run_ids[variant]
        assert run["done"] == run["planned"] == len(episodes) == 8
        assert run["success_rate"] == pytest.approx(sum(e["success"] for e in episodes) / 8)
        assert run["total_tokens"] == sum(e["total_tokens"] for e in episodes)
        assert run["cost_usd"] == 0.0 and run["errors"] == 0
    status, page = get(sweep.url)
    assert status == 200 and sweep.run_ids["memory"] in page and "8</span> / 8" in page


def test_an_unknown_cost_is_shown_as_unknown_never_summed_as_zero(sweep, tmp_path):
    rows = sweep.rows["baseline"]
    unpriced = f"{rows['episodes'][0]['run_id']}/3"
    changed = {table: [{**r, "cost_usd": None} if r.get("episode_id") == unpriced and "cost_usd" in r else r
                       for r in table_rows] for table, table_rows in rows.items()}
    write_job(tmp_path / "job", (*JOBS["baseline"], *COMMON), 0, changed)
    server = serve([tmp_path], port=0)
    try:
        (job,) = get_json(url_of(server) + "api/runs")
        assert job["runs"][0]["cost_usd"] is None
        assert "unknown" in get(url_of(server))[1]
        unknown = sum(c["episode_id"] == unpriced for c in rows["llm_calls"])
        page = get(url_of(server) + "compare")[1]
        assert f"<b>Cost unknown for {unknown} of {len(rows['llm_calls'])} model calls</b>" in page
        assert "Accuracy at matched spend" in page
        assert "in tokens: the cost of 1 of 8 episodes is unknown" in page
    finally:
        server.shutdown()


def test_episodes_filter_by_variant_success_purpose_and_text(sweep):
    episodes = sweep.table("episodes")
    found = get_json(sweep.url + "api/episodes?variant=memory&success=true")
    expected = episodes.filter((pl.col("variant") == "memory") & pl.col("success"))
    assert found["total"] == expected.height
    assert sorted(r["episode_id"] for r in found["rows"]) == sorted(expected["episode_id"])
    calls = sweep.table("llm_calls")
    curated = calls.filter(pl.col("purpose") == "curate")["episode_id"].unique()
    found = get_json(sweep.url + "api/episodes?purpose=curate")
    assert sorted(r["episode_id"] for r in found["rows"]) == sorted(curated) and found["total"] > 0
    question = episodes["question"][5]
    word = max(question.split(), key=len).upper()
    found = get_json(sweep.url + "api/episodes?text=" + urllib.request.quote(word))
    assert found["total"] == episodes.filter(pl.col("question").str.to_uppercase().str.contains(word)).height
    assert get_json(sweep.url + "api/episodes?error=yes")["total"] == 0
    options = found["options"]
    assert options["variant"] == sorted(JOBS) and "distill" in options["purpose"]


def test_episodes_are_paginated_in_stream_order(sweep, monkeypatch):
    monkeypatch.setattr(view_queries, "PAGE_SIZE", 10)
    pages = [get_json(sweep.url + f"api/episodes?page={n}") for n in (1, 2, 3)]
    assert [p["pages"] for p in pages] == [3, 3, 3] and [len(p["rows"]) for p in pages] == [10, 10, 4]
    ids = [r["episode_id"] for p in pages for r in p["rows"]]
    assert len(set(ids)) == 24
    first = [r for r in pages[0]["rows"] if r["run_dir"] == "0"]
    assert [r["stream_position"] for r in first] == list(range(8))
    status, html_page = get(sweep.url + "episodes?family=capital&error=no")
    next_page = 'href="/episodes?family=capital&amp;error=no&amp;page=2" id="next"'
    assert status == 200 and next_page in html_page


def test_a_reply_with_malformed_tool_calls_is_shown_as_written(sweep, tmp_path):
    rows = sweep.rows["baseline"]
    episode_id = rows["episodes"][0]["episode_id"]
    transcripts = [{**t, "tool_calls": "[{not json"} if t["episode_id"] == episode_id else t
                   for t in rows["transcripts"]]
    write_job(tmp_path / "0", (*JOBS["baseline"], *COMMON), 0, {**rows, "transcripts": transcripts})
    server = serve([tmp_path], port=0)
    try:
        status, page = get(url_of(server) + f"episode?dir=0&id={urllib.request.quote(episode_id)}")
        assert status == 200 and "[{not json" in page
    finally:
        server.shutdown()


def test_one_episode_shows_every_call_with_its_transcript_and_the_memory_it_used(sweep):
    rows = sweep.rows["memory"]
    episode_id = f"{sweep.run_ids['memory']}/3"
    detail = get_json(sweep.url + f"api/episode?dir=0&id={urllib.request.quote(episode_id)}")
    calls = [c for c in rows["llm_calls"] if c["episode_id"] == episode_id]
    transcripts = {t["call_id"]: t for t in rows["transcripts"] if t["episode_id"] == episode_id}
    assert sorted(c["call_id"] for c in detail["calls"]) == sorted(c["call_id"] for c in calls)
    for call in detail["calls"]:
        assert call["messages"] == transcripts[call["call_id"]]["messages"]
        assert call["reply"] == transcripts[call["call_id"]]["reply"]
        assert {"cache_read_tokens", "reasoning_tokens", "cost_usd", "latency_s", "tool_calls"} <= set(call)
    assert detail["episode"]["question"] and detail["attempts"][0]["episode_id"] == episode_id
    inserted = {e["memory_id"]: e["episode_id"] for e in rows["memory_events"] if e["event"] == "insert"}
    retrieved = [e for e in detail["events"]["memory_events"] if e["event"] == "retrieve"]
    assert retrieved and all(e["written_by"] == inserted[e["memory_id"]] for e in retrieved)
    assert detail["events"]["gate_events"] and detail["events"]["safety_events"]
    status, page = get(sweep.url + f"episode?dir=0&id={urllib.request.quote(episode_id)}")
    replies = [t["reply"] for t in transcripts.values() if t["reply"]]
    assert status == 200 and replies and all(html.escape(r) in page for r in replies)
    reasons = [a["score_reason"] for a in rows["attempts"] if a["episode_id"] == episode_id]
    assert reasons and all(r and html.escape(r) in page for r in reasons)  # why each attempt scored so


def test_what_was_learnt_links_each_item_to_its_writer_its_decisions_and_its_users(sweep):
    rows = sweep.rows["memory"]
    state = get_json(sweep.url + f"api/learnt?dir=0&run={sweep.run_ids['memory']}")
    inserts = [e for e in rows["memory_events"] if e["event"] == "insert"]
    memory = [c for c in state["changes"] if c["source"] == "memory"]
    assert len(memory) == len(inserts) == state["total"]
    assert [c["stream_position"] for c in memory] == sorted(c["stream_position"] for c in memory)
    gate = {g["edit_id"]: g["accepted"] for g in rows["gate_events"]}
    for change in memory:
        written = next(e for e in inserts if e["memory_id"] == change["item_id"])
        assert change["episode_id"] == written["episode_id"]
        users = [e for e in rows["memory_events"]
                 if e["event"] == "retrieve" and e["memory_id"] == change["item_id"]]
        assert change["uses"] == len(users)
        succeeded = {e["episode_id"] for e in rows["episodes"] if e["success"]}
        assert change["uses_succeeded"] == sum(u["episode_id"] in succeeded for u in users)
        assert [u["episode_id"] for u in change["used_by"]] == [
            u["episode_id"] for u in sorted(users, key=lambda u: u["stream_position"])][:10]
        assert [g["accepted"] for g in change["gate"]] == [gate[change["item_id"]]]
        assert {s["stage"] for s in change["safety"]} >= {"write"}
    assert len(get_json(sweep.url + f"api/learnt?dir=0&run={sweep.run_ids['memory']}&at=0")["alive"]) == 1
    assert len(state["alive"]) == len(inserts) and state["snapshots"][-1]["final"]
    playbook = get_json(sweep.url + f"api/learnt?dir=1&run={sweep.run_ids['playbook']}")
    added = [e for e in sweep.rows["playbook"]["playbook_events"] if e["event"] == "add"]
    assert {c["item_id"] for c in playbook["changes"] if c["event"] == "add"} == {
        e["bullet_id"] for e in added}


def test_the_comparison_is_the_reports_main_table_on_the_selected_runs(sweep):
    compared = get_json(sweep.url + "api/compare")
    variants = next(s for s in compared["sections"] if s["title"] == "Variants")
    episodes = label_runs(sweep.table("episodes"), sweep.table("runs"))
    expected = main_table(episodes)
    assert [r["variant"] for r in variants["rows"]] == expected["variant"].to_list()
    assert [r["success_rate"] for r in variants["rows"]] == pytest.approx(expected["success_rate"].to_list())
    assert any(s["title"].startswith("Accuracy at matched spend") for s in compared["sections"])
    one = get_json(sweep.url + f"api/compare?run=0|{sweep.run_ids['memory']}")
    assert [r["variant"] for r in one["sections"][0]["rows"]] == ["memory"]
    both = f"run=0|{sweep.run_ids['memory']}&run=2|{sweep.run_ids['baseline']}"
    status, page = get(sweep.url + f"compare?{both}")
    assert status == 200 and "Paired differences against baseline" in page and "/static/plotly.js" in page


@pytest.mark.parametrize(("path", "status", "says"), [
    ("nowhere", 404, "no page /nowhere"),
    ("episode?dir=0&id=no-such-episode", 404, "no episode 'no-such-episode'"),
    ("learnt?dir=0&run=no-such-run", 404, "no agent run 'no-such-run'"),
    ("learnt?dir=7&run=x", 404, "no run directory '7'"),
    ("episodes?seed=abc", 400, "seed must be a whole number"),
    ("api/episode?dir=0", 400, "missing ?id="),
    ("compare?run=0|no-such-run", 404, "none of the selected agent runs"),
])
def test_bad_input_gets_a_one_line_page_never_a_traceback(sweep, path, status, says):
    got, body = get(sweep.url + path)
    assert got == status and html.escape(says) in body and "Traceback" not in body


def test_tables_written_before_a_column_existed_read_it_as_null(sweep, tmp_path):
    writer = write_job(tmp_path / "old", (*JOBS["baseline"], *COMMON), 0, sweep.rows["baseline"], close=False)
    writer.close(compact=False)
    for part in (tmp_path / "old" / "episodes").glob("*.parquet"):  # as schema 4 wrote them
        pq.write_table(pq.read_table(part).drop_columns(["cache_read_tokens", "reasoning_tokens"]), part)
    server = serve([tmp_path], port=0)
    try:
        assert get_json(url_of(server) + "api/runs")[0]["runs"][0]["done"] == 8
        found = get_json(url_of(server) + "api/episodes?success=true")
        assert found["total"] == sum(e["success"] for e in sweep.rows["baseline"]["episodes"])
        variants = get_json(url_of(server) + "api/compare")["sections"][0]["rows"]
        assert variants[0]["episodes"] == 8 and variants[0]["cache_read_share"] is None
    finally:
        server.shutdown()


def test_runs_are_found_however_deep_as_outputs_lays_them_out(sweep, tmp_path):
    job_dir = tmp_path / "runs" / "2026-12-01" / "10-00-00"
    write_job(job_dir, (*JOBS["baseline"], *COMMON), 0, sweep.rows["baseline"])
    server = serve([tmp_path], port=0)
    try:
        (job,) = get_json(url_of(server) + "api/runs")
        assert job["dir"] == "runs/2026-12-01/10-00-00" and job["runs"][0]["done"] == 8
    finally:
        server.shutdown()


def test_a_path_without_tables_is_one_line_on_stderr(tmp_path, capsys):
    assert main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'absent'}: no such directory"
    assert main([str(tmp_path)]) == 2
    assert "holds no harness run" in capsys.readouterr().err


def test_the_viewer_links_to_report_html(sweep):
    (sweep.root / "report.html").write_text("<html><body>the report</body></html>")
    try:
        assert 'href="/report/0"' in get(sweep.url)[1]
        assert get(sweep.url + "report/0") == (200, "<html><body>the report</body></html>")
    finally:
        (sweep.root / "report.html").unlink()


def live_job(sweep: Sweep, root: Path, first: int) -> tuple[TableWriter, dict[str, list[dict[str, Any]]]]:
    """A job still running: its writer open, manifest `running`, the rows of its first `first`
    episodes written; returns the writer and the rest of the rows, to land later."""
    rows = sweep.rows["baseline"]
    early = {t: [r for r in rs if r.get("stream_position", 0) < first and
                 int(str(r.get("episode_id") or "x/0").rsplit("/", 1)[-1]) < first] for t, rs in rows.items()}
    late = {t: [r for r in rs if r not in early[t]] for t, rs in rows.items()}
    writer = write_job(root / "0", (*JOBS["baseline"], *COMMON), 0, early, status="running", close=False)
    return writer, late


def test_part_files_landing_while_a_run_writes_show_up(sweep, tmp_path):
    writer, late = live_job(sweep, tmp_path, first=4)
    server = serve([tmp_path], port=0)
    try:
        (job,) = get_json(url_of(server) + "api/runs")
        assert job["status"] == "running" and job["runs"][0]["done"] == 4 and job["runs"][0]["planned"] == 8
        writer.append_many(late)
        writer.flush()
        assert get_json(url_of(server) + "api/runs")[0]["runs"][0]["done"] == 8
        writer.close()  # compaction: the parts become one file, and nothing is counted twice
        assert get_json(url_of(server) + "api/runs")[0]["runs"][0]["done"] == 8
        assert get_json(url_of(server) + "api/episodes")["total"] == 8
    finally:
        server.shutdown()


@pytest.mark.slow
def test_the_bench_writes_a_sweep_the_harness_reads_and_measures_every_page(tmp_path):
    written = generate(tmp_path, rows=2_000, jobs=2, calls_per_episode=10)
    dirs = [tmp_path / "0", tmp_path / "1"]
    assert read_tables(dirs, "transcripts").height == written["transcripts"] == 2_000
    assert read_tables(dirs, "episodes").height == written["episodes"] == 200
    results = measure(tmp_path, written["run_ids"], episodes_per_job=100, repeats=1, compare=False)
    pages = [r for r in results if "status" in r]
    assert [r["status"] for r in pages] == [200] * len(pages) and len(pages) == 10
    assert all(0 < r["first_s"] < 30 for r in pages) and 0 < max(r["peak_mb"] for r in results) < 1024


def test_a_running_jobs_many_part_files_are_read_through_the_viewers_chunks(sweep, tmp_path, monkeypatch):
    monkeypatch.setattr(part_chunks, "CHUNK_PARTS", 3)
    rows = sweep.rows["baseline"]
    writer = write_job(tmp_path / "0", (*JOBS["baseline"], *COMMON), 0, {}, status="running", close=False)
    for episode in rows["episodes"]:  # one part per table and episode, as a slow job flushes them
        writer.append_many({t: [r for r in rs if r.get("episode_id") == episode["episode_id"]]
                            for t, rs in rows.items()})
        writer.flush()
    store = Store([tmp_path])
    parts = sorted((tmp_path / "0" / "episodes").glob("*.parquet"))
    assert len(parts) == 8
    scan = store.scan("episodes", store.run_dirs())
    assert [str(p) in scan for p in parts] == [False] * 6 + [True] * 2  # 2 chunks of 3, 2 parts as they are
    assert runs_overview(store)[0]["runs"][0]["done"] == 8
    writer.close()  # the job's own compaction replaces the parts: the chunks are dropped
    (compacted,) = (tmp_path / "0" / "episodes").glob("*.parquet")
    assert str(compacted) in store.scan("episodes", store.run_dirs())
    assert runs_overview(store)[0]["runs"][0]["done"] == 8
    assert list_episodes(store, EpisodeFilter())["total"] == 8


# In a real browser --------------------------------------------------------------------------------

def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
@tiers.starts_processes
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install "
                                   "-e '.[dev]')")
    executable = find_chromium()
    with sync_api.sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        except Exception as error:  # no browser at all: apt-get install chromium (see .ci/run)
            pytest.skip(f"no chromium to drive: apt-get install -y chromium (.ci/run does) "
                        f"({type(error).__name__}: {str(error).splitlines()[0]})")
        yield launched
        launched.close()


SCREENSHOTS = Path(os.environ.get("HARNESS_VIEW_SCREENSHOTS")
                   or Path(tempfile.gettempdir()) / "harness-view-screenshots" / "tests")
"""Where the browser tests leave a screenshot of each page (printed; shown with `pytest -s`)."""


@pytest.fixture(scope="module")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nviewer screenshots: {SCREENSHOTS}")
    return SCREENSHOTS


class Tab:
    """A browser page that keeps every console error and uncaught exception it sees."""

    def __init__(self, browser, screenshots: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.screenshots = screenshots

    def shoot(self, name: str) -> None:
        self.page.screenshot(path=str(self.screenshots / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.page.close()
        assert self.errors == []


@pytest.fixture
def tab(browser, screenshots) -> Iterator[Tab]:
    opened = Tab(browser, screenshots)
    yield opened
    opened.close()


def test_browser_every_page_opens_without_console_errors(sweep, tab):
    (sweep.root / "report.html").write_text("<html><body><h1>Report</h1></body></html>")
    try:
        tab.page.goto(sweep.url)
        assert tab.page.locator("#runs tr").count() == 4
        tab.shoot("runs")
        tab.page.click("text=Episodes")
        assert tab.page.inner_text("#total") == "24"
        tab.shoot("episodes")
        tab.page.click("text=Compare")
        tab.page.wait_for_selector(".plotly .main-svg")
        assert tab.page.locator("h2", has_text="Variants").count() == 1
        tab.shoot("compare")
        tab.page.click("text=report.html (.)")
        assert tab.page.inner_text("h1") == "Report"
    finally:
        (sweep.root / "report.html").unlink()


def test_browser_a_learnt_item_leads_to_the_episode_that_wrote_it_and_back(sweep, tab):
    rows = sweep.rows["memory"]
    tab.page.goto(sweep.url)
    tab.page.click(f"text={sweep.run_ids['memory']}")
    tab.page.wait_for_selector("#timeline")
    tab.shoot("learnt")
    inserts = [e for e in rows["memory_events"] if e["event"] == "insert"]
    first = min(inserts, key=lambda e: e["stream_position"])
    row = tab.page.locator("#timeline tr", has=tab.page.locator(f"#item-{first['memory_id']}"))
    assert row.locator(".uses").inner_text() == str(
        sum(e["event"] == "retrieve" and e["memory_id"] == first["memory_id"] for e in rows["memory_events"]))
    assert "accepted" in row.inner_text() and "flagged" in row.inner_text()
    row.locator("a.episode-link", has_text="written in").click()
    assert tab.page.inner_text("h1") == f"Episode {first['episode_id']}"
    written = tab.page.locator("#memory_events tr", has_text="insert")
    assert first["memory_id"] in written.inner_text()
    calls = [c for c in rows["llm_calls"] if c["episode_id"] == first["episode_id"]]
    assert tab.page.inner_text("#calls") == str(len(calls))
    tab.page.locator("details.call summary").first.click()
    tab.shoot("episode")
    written.locator("a.item-link").click()
    assert tab.page.url.endswith(f"#item-{first['memory_id']}")
    assert tab.page.locator(f"#item-{first['memory_id']}").is_visible()


def test_browser_filters_show_what_the_tables_hold(sweep, tab):
    episodes = sweep.table("episodes")
    tab.page.goto(sweep.url + "episodes")
    tab.page.select_option("select[name=variant]", "playbook")
    tab.page.select_option("select[name=success]", "false")
    tab.page.click("button:text('Filter')")
    expected = episodes.filter((pl.col("variant") == "playbook") & ~pl.col("success"))
    assert tab.page.inner_text("#total") == str(expected.height)
    shown = tab.page.locator("#episodes a.episode-link").all_inner_texts()
    assert sorted(shown) == sorted(expected["episode_id"])
    tab.shoot("episodes-filtered")


def test_browser_the_runs_table_refreshes_as_part_files_land(sweep, tab, tmp_path):
    writer, late = live_job(sweep, tmp_path, first=4)
    server = serve([tmp_path], port=0)
    try:
        tab.page.goto(url_of(server))
        assert tab.page.inner_text("#runs .done") == "4"
        writer.append_many(late)
        writer.flush()
        deadline = time.monotonic() + 10
        while tab.page.inner_text("#runs .done") != "8" and time.monotonic() < deadline:
            tab.page.wait_for_timeout(200)
        assert tab.page.inner_text("#runs .done") == "8"
        tab.shoot("runs-live")
        writer.close()
    finally:
        server.shutdown()
