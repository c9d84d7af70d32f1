"""Resume replays the episodes an interrupted run had finished (harness/driver/resume.py): for each of the
new mechanisms, the state after a replayed prefix and the rest of the stream is exactly the state of
an uninterrupted run (the kill -9 itself is tested end to end in tests/driver/test_resume.py)."""

import json

import pyarrow.parquet as pq
import pytest

from tests.conftest import replayed_run

VARIANTS = {
    "playbook": ["variant=playbook"],
    "skills": ["variant=skills", "variant.gate=none", "variant.max_skills=2",
               "model.scripted.rules=[{purpose: propose, reply: 'Answer with the city name only.'}]"],
    "gated skills": ["variant=skills", "variant.probe_size=4", "stream.tuning_size=8"],
    "self_refine": ["variant=self_refine"],
    "gated memory": ["variant=memory", "variant.gate=sealed", "variant.probe_size=4", "stream.tuning_size=8"],
    "safe memory": ["variant=memory", "variant.safety={policy: block}",
                    "model.scripted.rules=[{purpose: safety, contains: Paris, reply: UNSAFE},"
                    " {purpose: safety, reply: SAFE}]"],
}


def final_state(overrides: list[str], finished: int) -> tuple[dict, list[dict]]:
    directory, episodes = replayed_run(overrides, finished)
    state = json.loads((directory / "state.json").read_text())
    memory = directory / "memory.parquet"
    if memory.exists():  # memory ids are random per run; the items' content is what must match
        state["memory"] = sorted(pq.read_table(memory).select(["text", "source_task_id"]).to_pylist(),
                                 key=lambda item: item["source_task_id"])
    return state, episodes


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_resumed_run_ends_with_the_state_of_an_uninterrupted_one(variant):
    whole, episodes = final_state(VARIANTS[variant], finished=0)
    resumed, replayed = final_state(VARIANTS[variant], finished=5)
    learnt = whole.get("bullets") or whole.get("library") or whole.get("memory")
    # Something was learnt, so the comparison can fail (a gate that admits nothing still keeps successes).
    assert learnt or whole.get("successes") or variant == "self_refine"
    assert resumed == whole
    assert len(replayed) == len(episodes) - 5  # the replayed episodes are not written again
    assert [e["success"] for e in replayed] == [e["success"] for e in episodes[5:]]
