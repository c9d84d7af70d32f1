"""Step 3 of the plan, streams: which tasks an agent run gets, in what order, and as it is shown them.

The task *set* of an agent run depends on its seed; the *order* on its order seed (the seed itself
unless `stream.order_seeds` lists several), so the same set can be run in several orders and the
variance due to order measured. Scenarios:
- `sequential`: one agent carries what it learns across the stream; with several families they
  come in blocks, one family after another;
- `interleaved`: one agent, the families dealt round-robin (each family's tasks in seeded order),
  so transfer and interference between them show;
- `isolated`: a fresh agent for every task: nothing learnt is carried (the runner rebuilds it).
An env whose pool is ordered (its `order_option` set, e.g. env=dataset's `order_by` a date) keeps that
order: the seed still draws the set, but the stream runs it in the pool's order (interleaved: each
family in that order, the families dealt round-robin in the order they first appear).
Last, each task is shown as the env shows it to the run's seed (`Environment.task_for_seed`: the
dataset env's options, shuffled by seed), the tuning split's too.
"""

from __future__ import annotations

import random
from collections import defaultdict

from envs.base import Environment, Task
from harness.agent_run.tasks import TaskPool, safe_task
from harness.config import SCENARIOS as SCENARIOS  # defined with the settings that name them
from harness.config import StreamSettings


def plan_stream(tasks: TaskPool, stream: StreamSettings, seed: int,
                order_seed: int) -> tuple[list[Task], list[Task]]:
    """The agent run's stream (its seed draws the set, its order seed the order) and its tuning tasks,
    both as the run's seed shows them."""
    assert stream.num_tasks is not None  # filled by step 1 (harness.agent_run.tasks)
    drawn = sample_tasks(tasks.evaluation, stream.num_tasks, seed, tasks.ordered)
    ordered = order_tasks(drawn, stream.scenario, order_seed, tasks.ordered)
    shown = show_for_seed(tasks.env, [*ordered, *tasks.tuning], seed)
    return shown[:len(ordered)], shown[len(ordered):]


def sample_tasks(pool: list[Task], num_tasks: int, seed: int, ordered: bool = False) -> list[Task]:
    """`num_tasks` of the pool drawn by `seed`; `ordered`: in the pool's order."""
    drawn = random.Random(seed).sample(range(len(pool)), num_tasks)
    return [pool[i] for i in (sorted(drawn) if ordered else drawn)]


def order_tasks(tasks: list[Task], scenario: str, order_seed: int, ordered: bool = False) -> list[Task]:
    """The stream: `tasks` shuffled by `order_seed` (by family for the scenario), or, `ordered`, in
    the order given (`order_seed` unused)."""
    if ordered and scenario != "interleaved":
        return list(tasks)
    by_family: dict[str, list[Task]] = defaultdict(list)
    if ordered:
        for task in tasks:
            by_family[task.family].append(task)
        families = list(by_family)
    else:
        rng = random.Random(order_seed)
        for task in sorted(tasks, key=lambda t: t.task_id):  # independent of how the set was drawn
            by_family[task.family].append(task)
        families = sorted(by_family)
        rng.shuffle(families)
        for family in families:
            rng.shuffle(by_family[family])
    if scenario == "interleaved":
        rounds = max(len(v) for v in by_family.values())
        return [by_family[f][i] for i in range(rounds) for f in families if i < len(by_family[f])]
    return [task for family in families for task in by_family[family]]


def show_for_seed(env: Environment, tasks: list[Task], seed: int) -> list[Task]:
    """These tasks as the agent run with this seed is shown them (`Environment.task_for_seed`); a
    task the env shows differently is made safe again, one it shows as it is was made safe already."""
    shown = [(task, env.task_for_seed(task, seed)) for task in tasks]
    return [seen if seen is task else safe_task(seen) for task, seen in shown]
