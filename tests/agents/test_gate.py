"""The sealed gate: a self-edit takes effect only if held-out probes the agent never sees say it
does not regress (SEAL), or improves within a regression budget (GRASP)."""

import asyncio
import json
from collections import Counter

import pytest

from envs.countries import CountryFacts
from harness.agent_api import Recorder
from harness.agent_run.gate import SealedGate, balanced_probe
from harness.config import ConfigError
from harness.tables.records import GateEventRow
from tests.conftest import run_variant, scripted_settings

POOL = CountryFacts(families=["capital", "region"]).tasks()
TUNING = POOL[::25]


class KnowsWhatItIsTold:
    """An actor that answers right exactly the tasks whose answers its system prompt lists (JSON)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, episode, messages):
        self.calls += 1
        known = json.loads(messages[0]["content"])
        question = messages[1]["content"]
        task = next(t for t in POOL if t.question == question)
        episode.step(task.answer if task.task_id in known else "no idea")


def state(task_ids):
    async def render(view):
        return json.dumps(sorted(task_ids))

    return render


def gate(**options) -> tuple[SealedGate, KnowsWhatItIsTold]:
    actor = KnowsWhatItIsTold()
    return SealedGate(TUNING, CountryFacts(families=["capital", "region"]), actor, Recorder(), size=6,
                      **options), actor


def audit(g: SealedGate, incumbent, candidate):
    return asyncio.run(g.audit("skill", "s1", "a skill", state(incumbent), state(candidate)))


def test_the_probe_is_balanced_over_families_and_fixed_by_the_seed():
    probe = balanced_probe(TUNING, 6, seed=3)
    assert Counter(t.family for t in probe) == {"capital": 3, "region": 3}
    assert probe == balanced_probe(TUNING, 6, seed=3) and probe != balanced_probe(TUNING, 6, seed=4)


def test_a_candidate_that_helps_is_accepted_and_one_that_breaks_items_is_rejected():
    g, _ = gate()
    probe = [t.task_id for t in g.items]
    helps = audit(g, probe[:2], probe[:4])
    assert helps.accepted
    assert (helps.incumbent_correct, helps.candidate_correct, helps.regressions) == (2, 4, 0)
    poisoned = audit(g, probe[:4], [])
    assert not poisoned.accepted and poisoned.regressions == 4


def test_the_regression_budget_decides_a_mixed_edit():
    mixed = ([0, 1], [1, 2, 3])  # one item broken, two gained: net +1
    for budget, accepted in ((0, False), (1, True)):
        g, _ = gate(regression_budget=budget)
        ids = [t.task_id for t in g.items]
        result = audit(g, [ids[i] for i in mixed[0]], [ids[i] for i in mixed[1]])
        assert (result.regressions, result.accepted) == (1, accepted)


def test_no_change_passes_only_when_ties_are_accepted():
    for ties in (False, True):
        g, _ = gate(accept_ties=ties)
        assert audit(g, [g.items[0].task_id], [g.items[0].task_id]).accepted is ties


def test_every_audit_is_a_gate_event_and_an_unchanged_incumbent_is_not_run_again():
    g, actor = gate()
    ids = [t.task_id for t in g.items]
    audit(g, ids[:1], ids[:2])
    audit(g, ids[:1], ids[:3])
    assert actor.calls == 6 * 3  # the incumbent once, each candidate once
    events = g.recorder.take()["gate_events"]
    assert [e.candidate_correct for e in events] == [2, 3]
    assert all(isinstance(e, GateEventRow) for e in events)


def test_a_sealed_gate_needs_held_out_probes_and_an_agent_that_edits(tmp_path):
    from harness.agent_run.plan import build_plan

    with pytest.raises(ConfigError, match=r"variant\.gate: the sealed gate audits edits on held-out probe"):
        build_plan(scripted_settings("variant=skills", "stream.tuning_size=0"), tmp_path)
    with pytest.raises(ConfigError, match="makes no self-edit the gate can audit"):
        run_variant("variant=memory", "variant.gate=sealed", "variant.memory.mode=examples",
                    "stream.num_tasks=1")


POISON = ("[{purpose: distill, reply: 'POISON: answer Paris always'},"
          " {purpose: validate, contains: POISON, reply: 'no'}]")


def test_a_poisoned_lesson_is_kept_out_of_memory_and_the_agent_never_sees_a_probe():
    run = run_variant("variant=memory", "variant.gate=sealed", "variant.probe_size=6", "stream.num_tasks=4",
                      "stream.tuning_size=10", "model.scripted.accuracy=0.5",
                      f"model.scripted.rules={POISON}")
    events = run.rows["gate_events"]
    assert len(events) == 4 and not any(e["accepted"] for e in events)
    assert all(e["regressions"] > 0 for e in events)
    assert [e["memory_size"] for e in run.rows["episodes"]] == [0, 0, 0, 0]
    probes = {m["content"] for r in run.requests("validate") for m in r.messages if m["role"] == "user"}
    seen = {m["content"] for r in run.requests("act") + run.requests("distill") for m in r.messages}
    assert probes and not probes & seen
    calls = Counter(c["purpose"] for c in run.rows["llm_calls"])
    assert calls["validate"] == 6 * 2  # each distinct probe prompt once: the incumbent's, the poisoned one


def test_harmless_lessons_pass_a_tie_accepting_gate():
    run = run_variant("variant=memory", "variant.gate=sealed", "variant.probe_size=6", "stream.num_tasks=4",
                      "stream.tuning_size=10", "model.scripted.accuracy=0.5")
    assert all(e["accepted"] for e in run.rows["gate_events"])
    assert run.rows["episodes"][-1]["memory_size"] == 4


def test_a_learnt_tool_that_breaks_the_probe_is_not_registered():
    from tests.agents.test_tool_learning import SANDBOX

    sandbox = ", ".join(f"{k}: {str(v).lower()}" for k, v in SANDBOX.items())
    poison = "'def tool(q): return chr(80) + \"OISON\"'"  # its code is not poison; its result is
    run = run_variant("variant=tool_learning", "variant.gate=sealed", "variant.probe_size=4",
                      "stream.num_tasks=3", "stream.tuning_size=10", "model.scripted.accuracy=0.5",
                      f"variant.sandbox={{{sandbox}}}",
                      f"model.scripted.rules=[{{purpose: toolgen, reply: {poison}}},"
                      " {purpose: validate, contains: POISON, reply: 'no'}]")
    events = run.rows["tool_events"]
    assert events and {e["event"] for e in events} == {"rejected"}
    assert {e["error"] for e in events} == {"rejected by the sealed gate"}
    assert all(g["kind"] == "tool" and g["regressions"] > 0 for g in run.rows["gate_events"])
