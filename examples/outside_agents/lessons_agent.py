"""A self-improving agent on the plain `openai` SDK that knows nothing of the harness.

It answers each question with the lessons it has written so far in its system prompt. After a task
it got wrong it reflects, through the URL that bills purpose `reflect`, and keeps the lesson in
`lessons.json` in its workdir: the file is its whole state (a snapshot keeps the workdir).

    python -m harness variant=external \
        variant.entry=examples.outside_agents.lessons_agent:LessonsAgent
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openai import OpenAI

SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."
REFLECT_PROMPT = ("Question: {question}\nYour answer: {answer}\nThat answer was judged wrong. In one "
                  "short sentence, write a lesson that would help answer questions like this one.")


class LessonsAgent:
    def __init__(self, llm: Any, workdir: str, seed: int, max_lessons: int = 5) -> None:
        self.act = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
        self.reflect = OpenAI(base_url=llm.url("reflect"), api_key=llm.api_key)
        self.model = llm.model
        self.max_lessons = max_lessons
        self.file = Path(workdir) / "lessons.json"
        self.lessons: list[str] = json.loads(self.file.read_text()) if self.file.exists() else []

    def solve(self, task: dict[str, Any]) -> str:
        system = SYSTEM_PROMPT
        if self.lessons:
            kept = "\n".join(f"- {lesson}" for lesson in self.lessons[-self.max_lessons:])
            system = f"{SYSTEM_PROMPT}\n\nLessons from earlier tasks:\n{kept}"
        return self._ask(self.act, system, task["question"])

    def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None:
        if feedback["rewarded"]:
            return
        lesson = self._ask(self.reflect, "You write short, general lessons.",
                           REFLECT_PROMPT.format(question=task["question"], answer=answer))
        self.lessons.append(" ".join(lesson.split()))
        self.file.write_text(json.dumps(self.lessons, indent=1))

    def _ask(self, client: OpenAI, system: str, user: str) -> str:
        reply = client.chat.completions.create(model=self.model, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": user}])
        return reply.choices[0].message.content or ""
