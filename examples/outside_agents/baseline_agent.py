"""The baseline as an outside agent: one call per task on the plain `openai` SDK, with the messages
`variant=baseline` sends. Its rows equal the native baseline's (tests/agents/test_external.py)."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."


class BaselineAgent:
    def __init__(self, llm: Any, workdir: str, seed: int, system_prompt: str = SYSTEM_PROMPT) -> None:
        self.client = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
        self.model = llm.model
        self.system_prompt = system_prompt

    def solve(self, task: dict[str, Any]) -> str:
        reply = self.client.chat.completions.create(model=self.model, messages=[
            {"role": "system", "content": self.system_prompt}, {"role": "user", "content": task["question"]}])
        return reply.choices[0].message.content or ""
