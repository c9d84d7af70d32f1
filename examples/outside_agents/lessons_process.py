"""The lessons agent (lessons_agent.py) as a process: any language can do what this file does.

It speaks JSON lines on stdin/stdout (agents/external.py's `Process`): first `{"ready": true,
"ops": [...]}`, then one reply line per request. The harness puts the run's endpoint in its
environment (OPENAI_BASE_URL and OPENAI_API_KEY, so `OpenAI()` needs no argument; HARNESS_URLS for
the other purposes) and its workdir as the current directory. It keeps its lessons in memory and
saves them on request: a restart after a crash loads the last save.

    python -m harness variant=external \
        'variant.command=[python,examples/outside_agents/lessons_process.py]'
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from openai import OpenAI

SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."
REFLECT_PROMPT = ("Question: {question}\nYour answer: {answer}\nThat answer was judged wrong. In one "
                  "short sentence, write a lesson that would help answer questions like this one.")


class Lessons:
    def __init__(self) -> None:
        self.act = OpenAI()  # OPENAI_BASE_URL, OPENAI_API_KEY: the run's
        urls = json.loads(os.environ["HARNESS_URLS"])
        self.reflect = OpenAI(base_url=urls["reflect"])
        self.model = os.environ["HARNESS_MODEL"]
        self.max_lessons = int(json.loads(os.environ.get("HARNESS_OPTIONS") or "{}").get("max_lessons", 5))
        self.lessons: list[str] = []

    def solve(self, task: dict[str, Any]) -> dict[str, Any]:
        system = SYSTEM_PROMPT
        if self.lessons:
            kept = "\n".join(f"- {lesson}" for lesson in self.lessons[-self.max_lessons:])
            system = f"{SYSTEM_PROMPT}\n\nLessons from earlier tasks:\n{kept}"
        return {"answer": self._ask(self.act, system, task["question"])}

    def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> dict[str, Any]:
        if not feedback["rewarded"]:
            lesson = self._ask(self.reflect, "You write short, general lessons.",
                               REFLECT_PROMPT.format(question=task["question"], answer=answer))
            self.lessons.append(" ".join(lesson.split()))
        return {"ok": True}

    def save(self, dir: str) -> dict[str, Any]:
        (Path(dir) / "lessons.json").write_text(json.dumps(self.lessons))
        return {"ok": True}

    def load(self, dir: str) -> dict[str, Any]:
        self.lessons = json.loads((Path(dir) / "lessons.json").read_text())
        return {"ok": True}

    def _ask(self, client: OpenAI, system: str, user: str) -> str:
        reply = client.chat.completions.create(model=self.model, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": user}])
        return reply.choices[0].message.content or ""


def main() -> None:
    agent = Lessons()
    print(json.dumps({"ready": True, "ops": ["solve", "learn", "save", "load"]}), flush=True)
    for line in sys.stdin:  # the harness closes stdin when the run is over
        request = json.loads(line)
        try:
            if request["op"] == "solve":
                reply = agent.solve(request["task"])
            elif request["op"] == "learn":
                reply = agent.learn(request["task"], request["answer"], request["feedback"])
            elif request["op"] in ("save", "load"):
                reply = getattr(agent, request["op"])(request["dir"])
            else:
                reply = {"error": f"unknown op {request['op']!r}"}
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
