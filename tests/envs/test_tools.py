"""env=tools: stateful backends whose methods are tools, checked on the final state they are left in."""

import asyncio
import json
from collections import Counter

import pytest

from agents.baseline import BaselineAgent
from agents.tool_learning import LEARNT_TOOL, Tool, ToolLearningAgent
from envs.tool_calls import ToolBox
from envs.tools import FAMILIES, Bank, Calendar, ToolTasks
from harness.agent_api import AgentContext, Completion
from harness.models.chat import ToolCall, describe_tools, parse_text_call, text_call
from harness.models.gateway import Gateway
from harness.models.model_client import CallRequest
from harness.tables.records import StepRow, TranscriptRow, Usage
from tests.agents.test_tool_learning import SANDBOX
from tests.conftest import run_variant, scripted_settings, taken_rows

POOL = ToolTasks(tasks_per_family=5).tasks()


def task(family: str, index: int = 0):
    return next(t for t in POOL if t.family == family and t.task_id.endswith(f":{index}"))


def call(name: str, **arguments) -> ToolCall:
    return ToolCall.new(name, json.dumps(arguments))


def reference(t) -> list[ToolCall]:
    return [call(c["tool"], **c["arguments"]) for c in json.loads(t.answer)["calls"]]


def play(t, calls: list[ToolCall], reply: str | None):
    episode = ToolTasks().reset(t)
    results = [episode.call_tool(c) for c in calls]
    if reply is not None:
        episode.step(reply)
    return episode, results


def test_tool_schemas_come_from_the_type_hints():
    spec = next(s["function"] for s in ToolBox(Bank({"a": 1})).specs if s["function"]["name"] == "transfer")
    assert spec["parameters"]["properties"]["amount_cents"] == {"type": "integer"}
    assert spec["parameters"]["required"] == ["source", "destination", "amount_cents"]
    assert spec["parameters"]["additionalProperties"] is False
    assert "in cents" in spec["description"]
    assert {s["function"]["name"] for s in ToolBox(Calendar({})).specs} == {
        "list_events", "create_event", "cancel_event", "create_reminder"}


def test_malformed_calls_are_observations_with_their_error_kind_never_exceptions():
    box = ToolBox(Bank({"alice": 1000, "bob": 0}))
    cases = {
        "unknown_tool": ToolCall.new("wire_money", "{}"),
        "invalid_json": ToolCall.new("transfer", '{"source": "alice", '),
        "bad_arguments": call("transfer", source="alice", destination="bob", amount_cents="12.50"),
        "tool_error": call("transfer", source="alice", destination="zed", amount_cents=5),
    }
    for kind, bad in cases.items():
        result = box.call(bad)
        assert result.error == kind and result.content.startswith("error:")
    assert "amount_cents" in box.call(cases["bad_arguments"]).content
    assert box.call(call("transfer", source="alice", destination="bob", amount_cents=5, memo="x")).error == (
        "bad_arguments")
    assert box.backend.state()["balances"] == {"alice": 1000, "bob": 0}  # nothing bad got through


def test_the_text_protocol_reads_a_json_call_and_takes_plain_text_as_the_reply():
    made = parse_text_call('Sure. {"tool": "get_balance", "arguments": {"account": "bob"}}')
    assert (made.name, json.loads(made.arguments)) == ("get_balance", {"account": "bob"})
    assert parse_text_call("Bob has $12.00.") is None
    broken = parse_text_call('{"tool": "get_balance", "arguments": {"account": ')
    assert broken.name == "get_balance" and ToolBox(Bank({})).call(broken).error == "invalid_json"
    assert parse_text_call(text_call(made)).arguments == made.arguments
    described = describe_tools(ToolBox(Bank({})).specs)
    assert "transfer(source: string, destination: string, amount_cents: integer)" in described
    assert '{"tool": "<name>", "arguments": {...}}' in described


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_reference_solution_passes_every_check_through_the_episode(family):
    t = task(family)
    episode, results = play(t, reference(t), json.loads(t.answer)["reply"])
    score = episode.score()
    assert all(r.error is None for r in results)
    assert score.success and score.score == 1.0 and episode.done


def test_the_checker_reads_the_final_state_not_the_words():
    transfer = task("bank.transfer")
    episode, _ = play(transfer, [], "Done, I transferred the money.")
    assert not episode.score().success and episode.checks() == {"state": False}
    wrong = [call("request_payment", **{"payer": c_args["source"], "payee": c_args["destination"],
                                        "amount_cents": c_args["amount_cents"]})
             for c_args in (json.loads(reference(task("bank.pay"))[0].arguments),)]
    assert not play(task("bank.pay"), wrong, "Paid.")[0].score().success  # the distractor tool
    backup = task("files.backup")
    moved = [call("move_file", **json.loads(reference(backup)[0].arguments))]
    assert not play(backup, moved, "Backed up.")[0].score().success  # move is not copy


def test_a_missing_value_is_asked_for_and_guessing_fails():
    missing = task("bank.missing")
    asked, _ = play(missing, [], "How much should I send?")
    assert asked.score().success
    source, destination = missing.question.removeprefix("Send some money from ").rstrip(".").split(" to ")
    guessed, _ = play(missing, [call("transfer", source=source, destination=destination, amount_cents=100)],
                      "I sent $1.00.")
    assert guessed.checks() == {"state": False, "reply": False} and guessed.score().score == 0.0


def test_a_question_is_checked_on_the_reply_and_partial_credit_is_kept():
    balance = task("bank.balance")
    right = json.loads(balance.answer)["reply"]
    assert play(balance, [], right)[0].score().success
    half, _ = play(balance, [], "I don't know.")
    assert half.checks() == {"state": True, "reply": False} and half.score().score == 0.5


def test_the_pool_recurs_by_family_and_follows_its_seed():
    counts = Counter(t.family for t in POOL)
    assert set(counts) == set(FAMILIES) and set(counts.values()) == {5}
    assert len({t.question for t in POOL}) == len(POOL)
    assert [t.question for t in ToolTasks(tasks_per_family=5).tasks()] == [t.question for t in POOL]
    assert [t.question for t in ToolTasks(tasks_per_family=5, seed=1).tasks()] != [t.question for t in POOL]
    with pytest.raises(ValueError, match=r"env\.families: unknown"):
        ToolTasks(families=["bank.loan"])


@pytest.mark.parametrize("native", [True, False], ids=["native", "text"])
def test_a_run_records_every_tool_call_as_a_step_that_adds_up_to_the_act_tokens(native):
    run = run_variant("env=tools", "stream.num_tasks=8", "model.scripted.accuracy=1",
                      f"model.function_calling={str(native).lower()}")
    episodes, steps = run.rows["episodes"], run.rows["steps"]
    assert all(e["success"] for e in episodes)
    for episode in episodes:
        own = [s for s in steps if s["episode_id"] == episode["episode_id"]]
        assert own[-1]["tool"] is None and own[-1]["done"]
        assert sum(s["prompt_tokens"] + s["completion_tokens"] for s in own) == episode["act_tokens"]
    calls = [s for s in steps if s["tool"]]
    assert calls and all(s["tool_error"] is None for s in calls)
    assert all(StepRow.model_validate(s) for s in steps)
    act = run.requests("act")
    assert all(("tools" in r.params) == native for r in act)
    if not native:
        assert "You can use these tools" in act[0].messages[0]["content"]


def test_native_tool_calls_are_kept_in_the_transcripts():
    run = run_variant("env=tools", "env.families=[bank.half]", "stream.num_tasks=2",
                      "model.scripted.accuracy=1")
    rows = [TranscriptRow.model_validate(r) for r in run.rows["transcripts"]]
    made = [json.loads(r.tool_calls) for r in rows if r.tool_calls]
    assert [[c["name"] for c in m] for m in made] == [["get_balance"], ["transfer"]] * 2


class ScriptedReplies:
    """A model that answers act calls from a list: text, or tool calls; it records each request."""

    function_calling = True

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[list, dict]] = []

    async def complete(self, messages, purpose="act", **params) -> Completion:
        self.requests.append((messages, params))
        reply = self.replies.pop(0)
        calls = reply if isinstance(reply, list) else []
        return Completion(text="" if calls else reply, tool_calls=calls, usage=Usage(prompt_tokens=10),
                          call_id=f"c{len(self.requests)}")


def test_a_malformed_call_is_shown_to_the_agent_and_counted_and_the_episode_goes_on():
    balance = task("bank.balance")
    account = json.loads(reference(balance)[0].arguments)["account"]
    llm = ScriptedReplies([[ToolCall.new("get_balance", '{"account": ')],
                           [call("get_balance", account=account)],
                           json.loads(balance.answer)["reply"]])
    agent = BaselineAgent(AgentContext(llm=llm), max_steps=10)
    episode = ToolTasks().reset(balance)
    attempt = asyncio.run(agent.act(episode, agent.messages_for(episode.observation)))
    steps = taken_rows(agent.recorder)["steps"]
    assert [s["tool_error"] for s in steps] == ["invalid_json", None, None] and attempt.steps == 3
    second_prompt = llm.requests[1][0]
    assert second_prompt[-1]["role"] == "tool" and "not valid JSON" in second_prompt[-1]["content"]
    assert second_prompt[-2]["tool_calls"][0]["function"]["name"] == "get_balance"
    assert episode.score().success and "1 tool errors" in episode.score().response


def test_a_learnt_tool_is_offered_as_one_more_tool_and_runs_in_the_sandbox():
    balance = task("bank.balance")
    llm = ScriptedReplies([[call(LEARNT_TOOL, question=balance.question)], "It says 42."])
    agent = ToolLearningAgent(AgentContext(llm=llm), sandbox=SANDBOX, max_steps=10)
    agent.tools["bank.balance"] = Tool(tool_id="t1", family="bank.balance",
                                       code="def tool(question):\n    return '42'")
    agent._task = type("View", (), {"family": "bank.balance"})()
    episode = ToolTasks().reset(balance)
    asyncio.run(agent.solve(episode))
    offered = [s["function"]["name"] for s in llm.requests[0][1]["tools"]]
    assert offered[-1] == LEARNT_TOOL and "get_balance" in offered
    steps = taken_rows(agent.recorder)
    assert steps["steps"][0]["tool"] == LEARNT_TOOL and steps["steps"][0]["observation"] == '"42"'
    assert [e["event"] for e in steps["tool_events"]] == ["used"]
    assert episode.box.backend.state()["balances"] == balance.metadata["expected"]["balances"]


def test_the_gateway_passes_tools_through_and_caches_the_calls(tmp_path):
    settings = scripted_settings("model.scripted.accuracy=1", "cache.enabled=true", f"cache.dir={tmp_path}")
    half = task("bank.half")
    gateway = Gateway([settings.model], answer_key={half.question: half.answer}, cache=settings.cache)
    request = CallRequest(model=settings.model.name, messages=[{"role": "user", "content": half.question}],
                          purpose="act", run_id="r", task_id=half.task_id, attempt=1,
                          params={"temperature": 0.0, "tools": ToolTasks().reset(half).tools})
    first, again = (asyncio.run(gateway.call(request)) for _ in range(2))
    assert [c.name for c in first.tool_calls] == ["get_balance"] and first.record.error is None
    assert again.record.cached and again.tool_calls == first.tool_calls
    bare = asyncio.run(gateway.call(request.model_copy(update={"params": {"temperature": 0.0}})))
    assert first.record.prompt_tokens > bare.record.prompt_tokens + 100  # the specs are in the prompt
