"""Tool learning: tools are checked and sandboxed before they are registered, then reused."""

import asyncio
from types import SimpleNamespace

import pytest

import harness.sandbox
from agents.tool_learning import ToolLearningAgent, check_tool_code, extract_code
from envs.base import Task, TaskView
from envs.countries import CountryFacts
from harness.agent_api import AgentContext, AttemptResult, Completion, Feedback
from harness.agent_run.runner import EnvTrial
from harness.sandbox import kernel_isolation_problem
from harness.tables.records import Usage
from tests.conftest import run_variant, taken_rows

FRANCE = next(t for t in CountryFacts().tasks() if t.task_id == "capital:FRA")
GOOD_TOOL = "```python\ndef tool(question):\n    return 'Paris'\n```"
ISOLATION = "kernel" if kernel_isolation_problem() is None else "weak"
SANDBOX = {"weak": ISOLATION == "weak"}  # only where this machine has no namespaces


class FakeModel:
    """Replies with scripted text per purpose and remembers the calls."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.calls: list[tuple[str, list]] = []
        self.attempt = 1

    async def complete(self, messages, purpose="act", **params) -> Completion:
        self.calls.append((purpose, messages))
        return Completion(text=self.replies[purpose], usage=Usage(), call_id="c")


class OneTaskTrial(EnvTrial):
    def __init__(self, task: Task, llm) -> None:
        # what a trial reads of its episode runner: the env, the model client, the judge, the reward
        super().__init__(task, SimpleNamespace(env=CountryFacts(), llm=llm, judge=None,  # type: ignore[arg-type]
                                               reward_source="truth"))


def learn_from_failure(agent: ToolLearningAgent) -> dict:
    failure = AttemptResult(number=1, response="Lyon", steps=1, success=False, score=0.0,
                            judge_score=None, reward=0.0)
    asyncio.run(agent.learn(Feedback(task=TaskView.of(FRANCE), attempts=[failure])))
    return taken_rows(agent.recorder)


def test_code_checks():
    assert extract_code(GOOD_TOOL) == "def tool(question):\n    return 'Paris'"
    assert check_tool_code("def tool(q):\n    return q") is None
    assert "SyntaxError" in check_tool_code("def tool(q) return q")
    assert check_tool_code("def helper(q):\n    return q") == "no top-level function named tool"
    assert "exactly one argument" in check_tool_code("def tool(a, b):\n    return a")


def test_a_tool_that_passes_its_sandboxed_trial_is_registered_and_used_on_the_next_task():
    llm = FakeModel({"toolgen": GOOD_TOOL, "act": "Lyon"})
    agent = ToolLearningAgent(AgentContext(llm=llm), tool_use="answer", sandbox=SANDBOX)
    rows = learn_from_failure(agent)
    assert [e["event"] for e in rows["tool_events"]] == ["registered"]
    assert rows["tool_events"][0]["output"] == "Paris" and rows["tool_events"][0]["isolation"] == ISOLATION
    results = asyncio.run(agent.run_task(OneTaskTrial(FRANCE, llm)))
    assert results[-1].success and [p for p, _ in llm.calls] == ["toolgen"]  # no act call needed
    assert [e["event"] for e in taken_rows(agent.recorder)["tool_events"]] == ["used"]


def test_as_a_hint_the_tool_result_goes_into_the_prompt_before_the_question():
    llm = FakeModel({"toolgen": GOOD_TOOL, "act": "Paris"})
    agent = ToolLearningAgent(AgentContext(llm=llm), tool_use="hint", sandbox=SANDBOX)
    learn_from_failure(agent)
    asyncio.run(agent.run_task(OneTaskTrial(FRANCE, llm)))
    purpose, messages = llm.calls[-1]
    assert purpose == "act" and "returned: Paris" in messages[-1]["content"]
    assert messages[-1]["content"].endswith(FRANCE.question) and "returned" not in messages[0]["content"]


def test_bad_code_and_sandbox_violations_are_rejected_not_registered():
    for code, reason in [("no code at all", "SyntaxError"), ("x = 1", "no top-level function named tool"),
                         ("```python\ndef tool(q):\n    import socket\n    socket.socket()\n```",
                          "not allowed"),
                         ("```python\ndef tool(q):\n    while True:\n        pass\n```", "CPU-time limit")]:
        # The CPU limit comes first, even on a loaded machine where 1 s of CPU takes many seconds.
        agent = ToolLearningAgent(AgentContext(llm=FakeModel({"toolgen": code})),
                                  sandbox={"cpu_s": 1, "wall_s": 60, **SANDBOX})
        rows = learn_from_failure(agent)
        [event] = rows["tool_events"]
        assert event["event"] == "rejected" and reason in event["error"]
        assert agent.tools == {}


def test_no_tool_is_written_after_a_success_by_default():
    agent = ToolLearningAgent(AgentContext(llm=FakeModel({})), sandbox=SANDBOX)
    success = AttemptResult(number=1, response="Paris", steps=1, success=True, score=1.0,
                            judge_score=None, reward=1.0)
    asyncio.run(agent.learn(Feedback(task=TaskView.of(FRANCE), attempts=[success])))
    assert taken_rows(agent.recorder) == {}


def test_without_kernel_isolation_the_agent_is_not_built_unless_weak_is_asked_for(monkeypatch):
    monkeypatch.setattr(harness.sandbox, "kernel_isolation_problem", lambda: "no namespaces (test)")
    with pytest.raises(ValueError, match=r"variant\.sandbox\.weak=true"):
        ToolLearningAgent(AgentContext(llm=FakeModel({})))
    agent = ToolLearningAgent(AgentContext(llm=FakeModel({"toolgen": GOOD_TOOL})), sandbox={"weak": True})
    assert [e["isolation"] for e in learn_from_failure(agent)["tool_events"]] == ["weak"]


def test_tool_learning_runs_through_the_gateway_and_records_toolgen_calls():
    weak = [f"variant.sandbox.weak={SANDBOX['weak']}".lower()]
    run = run_variant("variant=tool_learning", "model.scripted.accuracy=0", "stream.num_tasks=3", *weak)
    assert len(run.requests("toolgen")) == 3
    # the scripted model writes no code, so every tool is rejected and the run goes on
    assert [e["event"] for e in run.rows["tool_events"]] == ["rejected"] * 3
    assert {e["isolation"] for e in run.rows["tool_events"]} == {ISOLATION}
    assert all(e["overhead_tokens"] > 0 for e in run.rows["episodes"])
