"""Which seconds of a model call were the harness's own: a clock per asyncio task.

A call's wall time, from the request leaving to the reply being taken up, holds two things: the
model's (the provider working, the network) and the harness's (its own code running, and its task
ready to run but waiting for an event loop busy with other tasks, in a process the OS is not
running). On a quiet machine the second is milliseconds; on a busy one (a process that gets a third
of a core, a worker with dozens of agents) it was most of the wall time: a zero-latency model's
calls were recorded at 19.6 s p50 (docs/bench.md, under load). `watch` counts it per task, so the
gateway can record the model's part as `latency_s` and the harness's as `harness_s`.

How, per task:
- every callback the loop schedules with `call_soon` on behalf of a task (its steps, its wake-ups:
  `__self__` is the task) is timed from being scheduled to running (the task was ready, the loop was
  not) and while it runs (the task's own code, the process descheduled included);
- a timer the task set (`asyncio.sleep`, a scripted model's latency) counts from its due time to its
  callback running: the model's time was up, the loop was busy;
- work it hands to the loop's executor counts from its submission to the loop taking up its result
  where it only prepared the call (litellm runs `completion` there and gets back the coroutine that
  sends it: 1-2 ms of CPU quiet, seconds in a queue of 48 calls on a busy machine); where the thread
  sent the request itself (a provider litellm calls synchronously), only from its end.
A task's suspended time otherwise, awaiting a socket or a timer not yet due, is the model's. Not
seen: a reply that arrived while the loop ran other callbacks, before its next look at its sockets
(at most one turn of the loop per read).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any


class _Clock:
    """One task's harness seconds so far."""

    __slots__ = ("counted", "step_began", "until")

    def __init__(self) -> None:
        self.counted = 0.0
        self.step_began = 0.0
        """When its running step began (0: none is running)."""
        self.until = 0.0
        """Counted up to here already: a wake-up's wait is counted from here at the earliest."""

    def wait(self, since: float, now: float) -> None:
        """The task was held up from `since` to `now` (what was counted already is not again)."""
        self.counted += max(0.0, now - max(since, self.until))
        self.until = max(self.until, now)


_clocks: weakref.WeakKeyDictionary[asyncio.Task[Any], _Clock] = weakref.WeakKeyDictionary()
_watched: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
now = time.monotonic
"""The loop's clock (asyncio's timers are due on it)."""


def _clock_of(task: asyncio.Task[Any]) -> _Clock:
    clock = _clocks.get(task)
    if clock is None:
        clock = _clocks[task] = _Clock()
    return clock


class _Step:
    """A task's step or wake-up, timed from being scheduled to its end."""

    __slots__ = ("callback", "clock", "scheduled")

    def __init__(self, callback: Any, clock: _Clock) -> None:
        self.callback, self.clock, self.scheduled = callback, clock, now()

    def __call__(self, *args: Any) -> Any:
        clock = self.clock
        began = clock.step_began = now()
        clock.wait(self.scheduled, began)
        try:
            return self.callback(*args)
        finally:
            ended = now()
            clock.counted += ended - began
            clock.step_began, clock.until = 0.0, ended

    def __repr__(self) -> str:  # asyncio's debug mode names the callback in its warnings
        return repr(self.callback)


class _Timer:
    """A timer a task set, late by however long the loop did not get to it."""

    __slots__ = ("callback", "clock", "due")

    def __init__(self, callback: Any, clock: _Clock, due: float) -> None:
        self.callback, self.clock, self.due = callback, clock, due

    def __call__(self, *args: Any) -> Any:
        self.clock.wait(self.due, now())
        return self.callback(*args)

    def __repr__(self) -> str:
        return repr(self.callback)


def watch(loop: asyncio.AbstractEventLoop) -> None:
    """Time the tasks of `loop` from now on (once per loop; a few clock reads per task step). A loop
    whose methods cannot be replaced (uvloop's) stays unwatched: its calls' latency_s is then the
    send's wall time, harness_s 0."""
    if loop in _watched:
        return
    _watched.add(loop)
    call_soon, call_at, run_in_executor = loop.call_soon, loop.call_at, loop.run_in_executor

    def timed_call_soon(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            callback = _Step(callback, _clock_of(task))
        return call_soon(callback, *args, context=context)

    def timed_call_at(when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        task = asyncio.current_task(loop)
        if task is not None:
            callback = _Timer(callback, _clock_of(task), when)
        return call_at(when, callback, *args, context=context)

    def timed_run_in_executor(executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        task = asyncio.current_task(loop)
        if task is None:
            return run_in_executor(executor, func, *args)
        clock, submitted, ended = _clock_of(task), now(), [0.0, False]

        def in_thread() -> Any:
            result = func(*args)
            ended[:] = [now(), asyncio.iscoroutine(result)]
            return result

        def taken_up(_: asyncio.Future[Any]) -> None:  # before the task's wake-up, which is scheduled next
            if ended[0]:  # it only prepared the call: all of it the harness's; else from its end
                clock.wait(submitted if ended[1] else ended[0], now())

        future = run_in_executor(executor, in_thread)
        future.add_done_callback(taken_up)
        return future

    try:
        loop.call_soon = timed_call_soon  # type: ignore[method-assign]
        loop.call_at = timed_call_at  # type: ignore[method-assign]
        loop.run_in_executor = timed_run_in_executor  # type: ignore[method-assign]
    except (AttributeError, TypeError):  # its methods are fixed (uvloop's, which has no __dict__)
        return


def harness_seconds() -> float:
    """The current task's seconds so far that were the harness's: ready but not run, running, its
    timers late, its executor work (on an unwatched loop: 0). Read before and after a call, the
    difference is the call's."""
    task = asyncio.current_task()
    clock = _clocks.get(task) if task is not None else None
    if clock is None:
        return 0.0
    return clock.counted + (now() - clock.step_began if clock.step_began else 0.0)
