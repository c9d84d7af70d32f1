"""Outside agents that misbehave on purpose, for tests/agents/test_external.py: each takes its cue
from how many tasks it has been given, counted in a file of its workdir (so a restarted agent, a
new instance or process, goes on counting)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from openai import OpenAI


def next_task(workdir: str | Path) -> int:
    """1 for the first task this agent run gives, 2 for the second, ..."""
    counter = Path(workdir) / "tasks_seen"
    seen = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(seen))
    return seen


class Answering:
    """Asks the model, as the baseline does; on task number `fail_on`, `fault` goes wrong."""

    def __init__(self, llm: Any, workdir: str, seed: int, fail_on: int = 0, fault: str = "",
                 start_s: float = 0.0) -> None:
        time.sleep(start_s)  # slow imports, on a busy machine
        self.client = OpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        self.model, self.workdir, self.fail_on, self.fault = llm.model, workdir, fail_on, fault
        self.learnt: list[str] = []

    def solve(self, task: dict[str, Any]) -> Any:
        what = self.fault if next_task(self.workdir) == self.fail_on else None
        if what == "raise":
            raise ValueError("the outside agent tripped")
        if what == "hang":
            time.sleep(30)
        if what == "number":
            return 42
        reply = self.client.chat.completions.create(model=self.model, messages=[
            {"role": "user", "content": task["question"]}])
        return reply.choices[0].message.content

    def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None:
        self.learnt.append(task["task_id"])

    def save(self, directory: str) -> None:
        (Path(directory) / "learnt.json").write_text(json.dumps(self.learnt))

    def load(self, directory: str) -> None:
        self.learnt = json.loads((Path(directory) / "learnt.json").read_text())


class ToolUser:
    """A multi-step agent: native function calls through the endpoint, each one an env action."""

    def __init__(self, llm: Any, workdir: str, seed: int) -> None:
        self.client = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
        self.model = llm.model

    def solve(self, task: dict[str, Any], env: Any) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": env.observation}]
        while not env.done:
            message = self.client.chat.completions.create(model=self.model, messages=messages,
                                                          tools=env.tools).choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)
                action = json.dumps({"tool": call.function.name, "arguments": arguments})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": env.step(action)})
        return ""


def process() -> None:
    """The process flavour (variant.command=[python, tests/agents/outside_fakes.py]): HARNESS_OPTIONS'
    `fault` (crash, garbage, hang or error) happens on task number `fail_on`."""
    options = json.loads(os.environ["HARNESS_OPTIONS"])
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY: the run's
    learnt: list[str] = []
    print(json.dumps({"ready": True, "ops": ["solve", "learn", "save", "load"]}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "solve":
            number = next_task(os.environ["HARNESS_WORKDIR"])
            what = options.get("fault") if number == options.get("fail_on") else None
            if what == "crash":
                print("about to crash on purpose", file=sys.stderr, flush=True)
                os._exit(3)
            if what == "garbage":
                print("this is not JSON", flush=True)
                continue
            if what == "hang":
                time.sleep(60)
            if what == "error":
                trace = "Traceback ...\n  File \"x.py\", line 3, in solve\nKeyError: 'question'"
                print(json.dumps({"error": "KeyError: 'question'", "traceback": trace}), flush=True)
                continue
            reply = client.chat.completions.create(model=os.environ["HARNESS_MODEL"], messages=[
                {"role": "user", "content": request["task"]["question"]}])
            print(json.dumps({"answer": reply.choices[0].message.content}), flush=True)
        elif request["op"] == "learn":
            learnt.append(request["task"]["task_id"])
            print(json.dumps({"ok": True}), flush=True)
        elif request["op"] == "save":
            (Path(request["dir"]) / "learnt.json").write_text(json.dumps(learnt))
            print(json.dumps({"ok": True}), flush=True)
        elif request["op"] == "load":
            learnt = json.loads((Path(request["dir"]) / "learnt.json").read_text())
            print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":
    process()
