"""Episodic memory: isolated per agent run, retrieved into the next prompt, bounded, accounted."""

import asyncio

import lancedb

from tests.conftest import run_variant


def memory_run(*overrides: str, tasks: int = 8):
    return run_variant("variant=memory", f"stream.num_tasks={tasks}", *overrides)


def act_question_turn(run, task_id: str) -> str:
    """The user turn with the task's question, where recalled lessons go (test_prompt_layout.py)."""
    return next(r for r in run.requests("act") if r.task_id == task_id).messages[-1]["content"]


def test_a_retrieved_lesson_comes_from_an_earlier_task_of_the_same_run_and_is_in_the_prompt():
    run = memory_run()
    position = {e["task_id"]: e["stream_position"] for e in run.rows["episodes"]}
    retrieved = [e for e in run.rows["memory_events"] if e["event"] == "retrieve"]
    assert len(retrieved) == 3 * 7 - 3  # top 3 from the second task on, fewer while memory is small
    for event in retrieved:
        assert position[event["source_task_id"]] < event["stream_position"]
        assert f"- {event['text']}" in act_question_turn(run, event["task_id"])
    first = run.rows["episodes"][0]["task_id"]
    assert "Lessons" not in act_question_turn(run, first)  # nothing to recall before the first task


def test_one_lesson_is_distilled_and_stored_per_task():
    run = memory_run()
    inserts = [e for e in run.rows["memory_events"] if e["event"] == "insert"]
    assert [e["source_task_id"] for e in inserts] == [e["task_id"] for e in run.rows["episodes"]]
    assert len(run.requests("distill")) == 8
    assert [e["memory_size"] for e in run.rows["episodes"]] == list(range(1, 9))


def test_each_agent_run_has_its_own_memory():
    run_a = memory_run("seed=0")
    run_b = memory_run("seed=1")
    for run in (run_a, run_b):
        own = {e["task_id"] for e in run.rows["episodes"]}
        assert {e["source_task_id"] for e in run.rows["memory_events"]} <= own
    assert run_a.rows["episodes"][0]["run_id"] != run_b.rows["episodes"][0]["run_id"]


def test_capacity_evicts_the_least_important_item():
    run = memory_run("variant.memory.capacity=3", "model.scripted.accuracy=0.5")
    evicted = [e for e in run.rows["memory_events"] if e["event"] == "evict"]
    assert len(evicted) == 5 and max(e["memory_size"] for e in run.rows["episodes"]) == 3
    events = run.rows["memory_events"]
    first_eviction = events.index(evicted[0])
    before = events[:first_eviction]
    inserted = [e for e in before if e["event"] == "insert"]
    retrieved = [r["memory_id"] for r in before if r["event"] == "retrieve"]
    accesses = {e["memory_id"]: retrieved.count(e["memory_id"]) for e in inserted}
    expected = min(inserted, key=lambda e: (e["importance"], accesses[e["memory_id"]], e["stream_position"]))
    assert evicted[0]["memory_id"] == expected["memory_id"]  # least important, least used, oldest


def test_retrievals_are_counted_in_the_table():
    run = memory_run("variant.memory.top_k=1", tasks=5)
    spec_dir = run.workdir / "memory"

    async def access_counts():
        db = await lancedb.connect_async(spec_dir)
        table = await db.open_table(run.rows["episodes"][0]["run_id"])
        return {r["memory_id"]: r["access_count"] for r in await table.query().to_list()}

    counts = asyncio.run(access_counts())
    retrieved = [e["memory_id"] for e in run.rows["memory_events"] if e["event"] == "retrieve"]
    assert sum(counts.values()) == len(retrieved) == 4
    assert all(counts[m] == retrieved.count(m) for m in counts)


def test_memory_overhead_is_its_distill_and_embed_calls():
    run = memory_run()
    purposes = {c["purpose"] for c in run.rows["llm_calls"]}
    assert purposes == {"act", "distill", "embed"}
    for episode in run.rows["episodes"]:
        own = [c for c in run.rows["llm_calls"] if c["task_id"] == episode["task_id"]]
        assert episode["overhead_tokens"] == sum(c["total_tokens"] for c in own if c["purpose"] != "act")
    embeds = [c for c in run.rows["llm_calls"] if c["purpose"] == "embed"]
    assert all(c["model"] == "hashing/384" and c["prompt_tokens"] > 0 for c in embeds)


def test_examples_mode_stores_only_rewarded_answers_and_shows_them_as_prior_turns():
    run = memory_run("variant.memory.mode=examples", "model.scripted.accuracy=0.5", tasks=10)
    rewarded = {e["task_id"]: e["response"] for e in run.rows["episodes"] if e["reward"] >= 0.5}
    inserts = [e for e in run.rows["memory_events"] if e["event"] == "insert"]
    assert inserts and {e["source_task_id"]: e["text"] for e in inserts} == rewarded
    assert run.requests("distill") == []
    for event in (e for e in run.rows["memory_events"] if e["event"] == "retrieve"):
        messages = next(r for r in run.requests("act") if r.task_id == event["task_id"]).messages
        assert {"role": "assistant", "content": event["text"]} in messages[1:-1]


def test_a_lesson_that_carries_a_reflection_is_unverified():
    run = run_variant("variant=reflexion_memory", "model.scripted.accuracy=0", "stream.num_tasks=3")
    inserts = [e for e in run.rows["memory_events"] if e["event"] == "insert"]
    assert inserts and all(not e["verified"] for e in inserts)
    assert all("Reflection (unverified)" in r.messages[0]["content"] for r in run.requests("distill"))
    clean = memory_run("model.scripted.accuracy=0", tasks=3)
    assert all(e["verified"] for e in clean.rows["memory_events"] if e["event"] == "insert")


def test_with_a_self_judge_wrong_answers_are_stored_as_rewarded():
    truth = memory_run("variant.judge={}", "model.scripted.accuracy=0", tasks=4)
    judged = memory_run("variant.judge={}", "variant.reward_source=judge", "model.scripted.accuracy=0",
                        tasks=4)
    assert {e["importance"] for e in truth.rows["memory_events"] if e["event"] == "insert"} == {0.5}
    assert {e["importance"] for e in judged.rows["memory_events"] if e["event"] == "insert"} == {1.0}
    assert not any(e["success"] for e in judged.rows["episodes"])  # the truth did not change


def test_a_memory_compacted_every_few_writes_recalls_from_every_task_and_its_table_has_no_index():
    run = memory_run("variant.memory.compact_every=3", tasks=8)
    assert all(e["error"] is None for e in run.rows["episodes"])
    late = [e for e in run.rows["memory_events"] if e["event"] == "retrieve" and e["stream_position"] >= 4]
    assert len(late) == 3 * 4  # top 3 for each task

    async def indices():
        db = await lancedb.connect_async(run.workdir / "memory")
        table = await db.open_table(run.rows["episodes"][0]["run_id"])
        return await table.list_indices()

    assert asyncio.run(indices()) == []  # the search is the memory's own, exact (VectorMirror)
