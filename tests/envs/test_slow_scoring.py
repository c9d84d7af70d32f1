"""A slow verdict stops no other run's clock: scorers that can take seconds (a query, a helper process)
score in a thread at `settle`, so the event loop the worker's other agent runs share keeps turning."""

import asyncio
import time

from envs.base import SingleTurnEpisode, Task, Verdict
from envs.scorers import Scorer, scorer
from envs.scorers.math import Math
from envs.scorers.sql import Sql


class SlowScorer(Scorer):
    blocking = True

    def score(self, reply: str, task: Task) -> Verdict:
        time.sleep(1.0)  # a 30 s SQL query, shortened
        return Verdict(score=1.0, success=True, response=reply, reason="slow but right")


def test_a_slow_scorer_leaves_the_event_loop_free_and_still_gives_its_verdict():
    episode = SingleTurnEpisode(Task(task_id="t", family="f", question="q?", answer="a"), SlowScorer())

    async def meanwhile() -> float:
        """The longest the loop kept a 10 ms timer of another run waiting."""
        longest = 0.0
        for _ in range(50):
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            longest = max(longest, time.perf_counter() - started)
        return longest

    async def answer() -> None:  # as an agent run does: step with the reply, then settle
        await asyncio.sleep(0.05)
        episode.step("a")
        await episode.settle(checks=None)

    async def both() -> float:
        _, longest = await asyncio.gather(answer(), meanwhile())
        return longest

    assert asyncio.run(both()) < 0.5  # the scorer slept 1 s beside it
    score = episode.score()
    assert (score.success, score.reason) == (True, "slow but right")


def test_the_scorers_that_can_take_seconds_say_so():
    assert Math.blocking and Sql.blocking
    assert not scorer("exact").blocking
