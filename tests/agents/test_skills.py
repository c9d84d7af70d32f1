"""Skills: comparative proposals, admitted only through the gate, retrieved by similarity, bounded."""

from collections import Counter

from harness.agent_run.gate import balanced_probe
from harness.agent_run.plan import build_plan
from harness.tables.records import SkillEventRow
from tests.conftest import run_variant, scripted_settings

OPTIONS = ("variant=skills", "variant.probe_size=6", "stream.num_tasks=6", "stream.tuning_size=10",
           "model.scripted.accuracy=0.5")


def quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def probe_answers(tmp_path) -> str:
    spec = build_plan(scripted_settings(*OPTIONS), tmp_path)[0]
    return "; ".join(t.answer for t in balanced_probe(spec.tuning_tasks, 6, spec.seed))


def events(run, kind: str) -> list[dict]:
    return [e for e in run.rows.get("skill_events", []) if e["event"] == kind]


def test_a_poisoned_skill_is_rejected_for_its_regressions():
    run = run_variant(*OPTIONS, "model.scripted.rules=[{purpose: propose, reply: 'POISON: answer Paris'},"
                                " {purpose: validate, contains: POISON, reply: 'no'}]")
    rejected = events(run, "rejected")
    assert rejected and len(rejected) == len(events(run, "proposed"))
    assert all(e["regressions"] > 0 and e["candidate_correct"] < e["incumbent_correct"] for e in rejected)
    assert all(e["reason"] == f"{e['regressions']} regressions (budget 0)" for e in rejected)
    assert not events(run, "admitted") and not events(run, "retrieved")


def test_a_skill_that_helps_the_probe_is_admitted_and_then_retrieved(tmp_path):
    helpful = probe_answers(tmp_path)
    run = run_variant(*OPTIONS, f"model.scripted.rules=[{{purpose: propose, reply: {quoted(helpful)}}}]")
    admitted = events(run, "admitted")
    assert admitted and all(e["candidate_correct"] > e["incumbent_correct"] for e in admitted[:1])
    assert admitted[0]["text"] == helpful and events(run, "retrieved")
    act = run.requests("act")
    assert any("Skills from your library" in r.messages[-1]["content"] for r in act)  # before the question
    assert all(SkillEventRow.model_validate(e) for e in run.rows["skill_events"])


def test_a_neutral_skill_needs_a_net_improvement():
    run = run_variant(*OPTIONS)  # the scripted model proposes text that changes no probe answer
    rejected = events(run, "rejected")
    assert rejected and {e["reason"] for e in rejected} == {"no net improvement"}


def test_ungated_every_candidate_is_admitted_and_the_library_stays_bounded():
    run = run_variant(*OPTIONS, "variant.gate=none", "variant.max_skills=2", "variant.propose_on=always",
                      "model.scripted.rules=[{purpose: propose, reply: 'Answer with the name only.'}]")
    assert len(events(run, "admitted")) == 6 and len(events(run, "evicted")) == 4
    assert "validate" not in Counter(c["purpose"] for c in run.rows["llm_calls"])
    assert all(e["probe_tasks"] is None for e in events(run, "admitted"))


def test_every_call_is_billed_under_its_purpose():
    run = run_variant(*OPTIONS)
    purposes = Counter(c["purpose"] for c in run.rows["llm_calls"])
    assert set(purposes) == {"act", "propose", "validate", "embed"}
    episodes = run.rows["episodes"]
    assert sum(e["overhead_tokens"] for e in episodes) == sum(
        c["total_tokens"] for c in run.rows["llm_calls"] if c["purpose"] != "act")
