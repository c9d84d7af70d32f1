"""The report on the self-editing mechanisms: what each spends by purpose, what it wrote, what the
gate and the safety check let in, and, on env=safety, refusals and unsafe carry-over."""

import json

import pytest

from harness.report.build import main
from harness.tables.writer import TableWriter
from tests.conftest import run_variant

JOBS = {
    "playbook": ["variant=playbook"],
    "skills": ["variant=skills", "variant.probe_size=4", "stream.tuning_size=8",
               "model.scripted.rules=[{purpose: propose, reply: 'POISON'},"
               " {purpose: validate, contains: POISON, reply: 'no'}]"],
    "memory": ["variant=memory", "env=safety", "stream=interleaved", "variant.safety={policy: block}",
               "model.scripted.rules=[{purpose: safety, contains: Paris, reply: UNSAFE},"
               " {purpose: safety, reply: SAFE}]"],
    "opro": ["variant=opro", "stream.tuning_size=6", "variant.steps=2"],
    "gepa": ["variant=gepa", "stream.tuning_size=6", "variant.pareto_size=3", "variant.max_rollouts=24",
             "model.scripted.rules=[{purpose: optimize, contains: improved instruction,"
             " reply: '<instruction>Answer with the city name only.</instruction>'}]"],
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("mechanisms")
    for job, (variant, overrides) in enumerate(JOBS.items()):
        writer = TableWriter(root / str(job), flush_interval_s=0)
        result = run_variant(*overrides, "stream.num_tasks=8", "model.scripted.accuracy=0.5")
        for table, rows in result.rows.items():
            writer.append(table, rows)
        writer.close()
        (root / str(job) / "manifest.json").write_text(json.dumps({"status": "finished", "agent_runs": [
            {"run_id": result.rows["episodes"][0]["run_id"], "num_tasks": 8}]}))
        assert variant in result.rows["episodes"][0]["run_id"]
    assert main([str(root)]) == 0
    return (root / "report.md").read_text()


def section(report: str, title: str) -> list[list[str]]:
    body = report[report.index(f"## {title}"):].split("\n## ")[0]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in body.splitlines() if line.startswith("|")]


def test_tokens_are_shared_out_by_purpose(report):
    header, _, *rows = section(report, "Tokens by purpose")
    purposes = {"act", "reflect", "curate", "propose", "validate", "distill", "safety", "embed", "optimize"}
    assert purposes - {"embed"} <= set(header)
    for row in rows:
        assert abs(sum(float(v) for name, v in zip(header, row, strict=True) if name in purposes) - 1) < 0.01


def test_self_edits_count_what_was_written_admitted_and_blocked(report):
    header, _, *rows = section(report, "Self-edits")
    table = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert int(table["playbook"]["bullets_added"]) >= 1
    assert int(table["skills"]["skills_proposed"]) == int(table["skills"]["skills_rejected"]) >= 1
    assert int(table["skills"]["gate_rejected"]) == int(table["skills"]["skills_rejected"])
    assert int(table["memory"]["safety_allowed"]) >= 1


def test_on_the_safety_env_refusals_and_unsafe_replies_are_counted(report):
    header, _, *rows = section(report, "Safety")
    assert header[:6] == ["variant", "harmful", "refused", "benign", "benign_right", "benign_unsafe"]
    [memory] = rows
    assert int(memory[1]) + int(memory[3]) == 8


def test_the_prompt_search_of_opro_and_gepa_is_summed_per_group(report):
    header, _, *rows = section(report, "Prompt search")
    table = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert set(table) == {"opro", "gepa"}  # only the variants that searched
    opro = table["opro"]
    assert (opro["proposed"], opro["scored"], opro["tuning_tasks"]) == ("2", "3", "6")
    assert table["opro"]["protocol"] == "held_out"
    gepa = table["gepa"]
    assert int(gepa["proposed"]) >= 1 and 1 <= int(gepa["scored"]) <= int(gepa["proposed"]) + 1
    assert gepa["tuning_tasks"] == "3"  # its Pareto tasks
    for row in table.values():
        assert abs(float(row["selected_score"]) - float(row["start_score"]) - float(row["gain"])) < 1e-3
        assert float(row["gain"]) >= 0  # the selected prompt is the best scored, the start among them


def test_success_is_shown_per_family_where_a_stream_has_several(report):
    header, _, *rows = section(report, "By family")
    table = [dict(zip(header, row, strict=True)) for row in rows]
    memory = [row for row in table if row["variant"] == "memory"]
    assert {row["family"] for row in memory} == {"harmful", "benign"}  # env=safety, interleaved
    assert sum(int(row["episodes"]) for row in memory) == 8
    for row in table:  # a rate with its interval: "0.500 [0.000, 1.000]"
        rate, low, high = (float(x) for x in row["success_rate"].replace("[", "").replace("]", "")
                           .replace(",", "").split())
        assert 0 <= low <= rate <= high <= 1
