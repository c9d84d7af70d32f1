"""`python -m harness.bench code`: the `code` scorer's time per task on HumanEval-style tests (a
`check(candidate)` of asserts, then `check(<entry point>)`), each task's honest solution scored in the
kernel sandbox one after another, as an agent run scores its episodes.

It reports wall seconds per task (median, 90th percentile, mean) and the CPU seconds the sandbox's
processes spent per task, and checks that every honest solution passed (a bench that measured
failures would measure the wrong thing).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time

from harness.bench.common import table

TASKS: list[tuple[str, str, str]] = [
    ("add", "def add(a, b):\n    return a + b\n",
     "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
     "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\n"),
    ("has_close_elements",
     "def has_close_elements(numbers, threshold):\n    for i, a in enumerate(numbers):\n"
     "        for b in numbers[i + 1:]:\n            if abs(a - b) < threshold:\n"
     "                return True\n"
     "    return False\n",
     "METADATA = {'author': 'jt', 'dataset': 'test'}\n\n\ndef check(candidate):\n"
     "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True\n"
     "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False\n"
     "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True\n"
     "    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True\n"
     "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True\n"),
    ("separate_paren_groups",
     "def separate_paren_groups(s):\n    groups, depth, current = [], 0, ''\n    for c in s:\n"
     "        if c == '(':\n            depth += 1\n            current += c\n        elif c == ')':\n"
     "            depth -= 1\n            current += c\n            if depth == 0:\n"
     "                groups.append(current)\n                current = ''\n    return groups\n",
     "def check(candidate):\n"
     "    assert candidate('(()()) ((())) () ((())()())') == ['(()())', '((()))', '()', '((())()())']\n"
     "    assert candidate('() (()) ((())) (((())))') == ['()', '(())', '((()))', '(((())))']\n"
     "    assert candidate('(()(())((())))') == ['(()(())((())))']\n"),
    ("sort_even",
     "def sort_even(l):\n    evens = sorted(l[::2])\n    return [evens[i // 2] if i % 2 == 0 else x "
     "for i, x in enumerate(l)]\n",
     "def check(candidate):\n    assert tuple(candidate([1, 2, 3])) == tuple([1, 2, 3])\n"
     "    assert tuple(candidate([5, 3, -5, 2, -3, 3, 9, 0, 123, 1, -10])) == "
     "tuple([-10, 3, -5, 2, -3, 3, 5, 0, 9, 1, 123])\n"
     "    for n in range(100):\n        assert candidate(list(range(n))) == list(range(n))\n"),
    ("find_zero",
     "import math\n\n\ndef poly(xs, x):\n"
     "    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))\n\n\n"
     "def find_zero(xs):\n    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n"
     "        lo, hi = lo * 2.0, hi * 2.0\n    for _ in range(200):\n        mid = (lo + hi) / 2.0\n"
     "        if poly(xs, mid) * poly(xs, lo) > 0:\n            lo = mid\n"
     "        else:\n            hi = mid\n"
     "    return lo\n",
     "def check(candidate):\n    import math\n    import random\n    rng = random.Random(42)\n"
     "    import copy\n"
     "    for _ in range(20):\n        ncoeff = 2 * rng.randint(1, 4)\n        coeffs = []\n"
     "        for _ in range(ncoeff):\n            coeff = rng.randint(-10, 10)\n            if coeff == 0:\n"
     "                coeff = 1\n            coeffs.append(coeff)\n"
     "        solution = candidate(copy.deepcopy(coeffs))\n"
     "        assert math.fabs(poly(coeffs, solution)) < 1e-4\n"),
]
"""HumanEval-style tasks (entry point, an honest solution, the tests): the shapes of HumanEval/0, /1,
/37 and /32 (whose tests call the prompt's own `poly` too), and an `add` with a float tolerance."""


async def score_once(entry_point: str, solution: str, tests: str) -> tuple[bool, str]:
    """The `code` scorer's verdict on one reply, as an episode settles it: (success, reason)."""
    from envs.base import SingleTurnEpisode, Task
    from envs.scorers import scorer
    from harness.agent_run.checks import EpisodeChecks

    task = Task(task_id=entry_point, family="code", question=f"Write {entry_point}.",
                answer=f"{tests}\ncheck({entry_point})\n")
    episode = SingleTurnEpisode(task, scorer({"name": "code"}))
    episode.step(f"```python\n{solution}```")
    await episode.settle(EpisodeChecks(llm=None))  # type: ignore[arg-type]
    verdict = episode.score()
    return verdict.success, verdict.reason


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(rounds: int) -> list[dict[str, object]]:
    """Every task scored `rounds` times in turn (after one warm-up round): one row per task and one for
    all of them."""
    for entry_point, solution, tests in TASKS:  # warm-up: the kernel-isolation probe, page cache
        asyncio.run(score_once(entry_point, solution, tests))
    walls: dict[str, list[float]] = {name: [] for name, _, _ in TASKS}
    cpu_before = children_cpu_s()
    for _ in range(rounds):
        for entry_point, solution, tests in TASKS:
            started = time.perf_counter()
            success, reason = asyncio.run(score_once(entry_point, solution, tests))
            walls[entry_point].append(time.perf_counter() - started)
            if not success:
                raise RuntimeError(f"the honest solution of {entry_point} failed: {reason}")
    cpu_per_task = (children_cpu_s() - cpu_before) / (rounds * len(TASKS))
    rows: list[dict[str, object]] = [_row(name, times) for name, times in walls.items()]
    rows.append({**_row("all", [t for times in walls.values() for t in times]),
                 "sandbox CPU s per task": cpu_per_task})
    return rows


def _row(name: str, times: list[float]) -> dict[str, object]:
    ordered = sorted(times)
    return {"task": name, "runs": len(times), "median s": statistics.median(ordered),
            "p90 s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "mean s": statistics.fmean(ordered)}


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench code",
                                      description="The code scorer's time per task on HumanEval-style tests.")
    options.add_argument("--rounds", type=int, default=10, help="times each task is scored (10)")
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    print(table(measure(args.rounds)))
