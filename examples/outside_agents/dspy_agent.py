"""A DSPy program as an outside agent: `dspy.Predict` on `question -> answer`, with a few-shot
memory of the answers it got right.

    python -m harness variant=external \
        variant.entry=examples.outside_agents.dspy_agent:DSPyAgent "variant.options={k:4}"

Its `dspy.LM` is the run's endpoint (`openai/<model>` at `llm.base_url`, so every call bills
purpose act) with DSPy's response cache off: every call of the program reaches the endpoint, and
the harness counts them all. After a rewarded task it keeps the (question, answer) pair as a
`dspy.Example` demo, the last `k` of them, which is what DSPy's `LabeledFewShot` optimizer does with
a labelled train set: here the stream's rewards label it as it goes. The demos are its whole state
(`demos.json`, written by save and read by load).

Each instance has its own LM and adapter and uses them through `dspy.context(...)` around its call,
never `dspy.configure`: two agent runs in one worker process (each in a thread of its own) do not
share DSPy settings.

Why `PlainAdapter` and not DSPy's default: `ChatAdapter` asks the model to reply in
`[[ ## answer ## ]]` sections, and `JSONAdapter` in a JSON object. Small local models and the
scripted model answer in plain text, so both fail to parse and the task fails, after a second call
(`ChatAdapter` falls back to `JSONAdapter` on a parse error). `PlainAdapter` is a `dspy.Adapter`
subclass, the extension point DSPy provides for prompt formats: it writes the signature's
instructions as the system message, each demo as a user question and an assistant answer, then the
question, and parses the whole reply as the one output field; it never calls the LM itself, so one
`solve` is one call. The program stays a DSPy program (signature, module, demos, adapter, LM); only
the wire format is plain chat. It needs a signature with one output field, so `dspy.ChainOfThought`
(which adds `reasoning`) is not used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy


class AnswerQuestion(dspy.Signature):
    """You are a concise assistant. Answer with the answer only, no explanation."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class PlainAdapter(dspy.Adapter):
    """Demos and inputs as plain chat turns; the whole reply is the one output field."""

    def format_system_message(self, signature: type[dspy.Signature]) -> str:
        return signature.instructions

    def format_field_description(self, signature: type[dspy.Signature]) -> str:
        return ""

    def format_field_structure(self, signature: type[dspy.Signature]) -> str:
        return ""

    def format_task_description(self, signature: type[dspy.Signature]) -> str:
        return signature.instructions

    def format_user_message_content(self, signature: type[dspy.Signature], inputs: dict[str, Any],
                                    prefix: str = "", suffix: str = "", main_request: bool = False) -> str:
        values = [(name, inputs[name]) for name in signature.input_fields if name in inputs]
        if len(values) == 1:
            body = str(values[0][1])
        else:
            body = "\n".join(f"{name}: {value}" for name, value in values)
        return "\n\n".join(part for part in (prefix, body, suffix) if part)

    def format_assistant_message_content(self, signature: type[dspy.Signature], outputs: dict[str, Any],
                                         missing_field_message: str | None = None) -> str:
        (name,) = self._output_field(signature)
        value = outputs.get(name)
        return str(value) if value is not None else (missing_field_message or "")

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        (name,) = self._output_field(signature)
        return {name: completion.strip()}

    @staticmethod
    def _output_field(signature: type[dspy.Signature]) -> tuple[str]:
        names = tuple(signature.output_fields)
        if len(names) != 1:
            raise ValueError(f"PlainAdapter parses a reply into one output field, the signature has {names}")
        return names


class DSPyAgent:
    def __init__(self, llm: Any, workdir: str, seed: int, k: int = 4) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        # num_retries=0: the harness retries transient failures behind the endpoint, and a refused
        # call (a spent budget) must stop the task at once.
        self.lm = dspy.LM(f"openai/{llm.model}", api_base=llm.base_url, api_key=llm.api_key, cache=False,
                          num_retries=0)
        self.adapter = PlainAdapter()
        self.program = dspy.Predict(AnswerQuestion)
        self.k = k
        self.demos: list[dspy.Example] = []

    def solve(self, task: dict[str, Any]) -> str:
        self.program.demos = list(self.demos)
        with dspy.context(lm=self.lm, adapter=self.adapter):
            return self.program(question=task["question"]).answer

    def learn(self, task: dict[str, Any], answer: str | None, feedback: dict[str, Any]) -> None:
        if feedback["rewarded"] and answer:
            demo = dspy.Example(question=task["question"], answer=answer).with_inputs("question")
            self.demos = self._last_k([*self.demos, demo])

    def save(self, directory: str) -> None:
        demos = [{"question": demo.question, "answer": demo.answer} for demo in self.demos]
        (Path(directory) / "demos.json").write_text(json.dumps(demos, indent=1, ensure_ascii=False))

    def load(self, directory: str) -> None:
        demos = json.loads((Path(directory) / "demos.json").read_text())
        self.demos = self._last_k([dspy.Example(**demo).with_inputs("question") for demo in demos])

    def _last_k(self, demos: list[dspy.Example]) -> list[dspy.Example]:
        return demos[max(len(demos) - self.k, 0):]
