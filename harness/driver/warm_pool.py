"""The warm pool: a Ray kept running with the next command's pool actors started ahead, so that a
command with `ray.address=warm` reaches its first model call without starting Ray or paying its
workers' imports (litellm: seconds).

`python -m harness.warm start` (harness/warm.py) runs a small process of its own that starts a local
Ray and a `WarmKeeper` actor, and writes where it is to `ray.warm_pool` (a state file). The keeper
keeps one *generation* of pool actors ready: the model limits actor, the writer hub and the agent
workers, exactly those a command would start (harness/driver/pool.py `spawn_pool_actors`). A
command leases the generation, runs on it, and gives it back; the keeper then kills it and starts
the next, so every command gets processes no earlier command ran in (its rows are those of a cold
start), while nobody waits for the next generation's imports.

What keeps the pool honest:
- a lease: one command at a time; a second one meanwhile starts workers of its own on the same
  Ray, as the pool's guest. The holder renews it every RENEW_S; one not renewed for LEASE_TIMEOUT_S
  (its command was killed) is taken back, and its generation killed with whatever it still ran. A
  guest renews its visit in the same way;
- a code check: a generation any of whose processes imported a module whose file changed since
  (an edited agent, a reinstalled package) is replaced before it is leased;
- an idle timeout: the keeper's process stops the pool, Ray and all, after the idle time with no
  command on it, holder or guest (`--idle-minutes`), and `python -m harness.warm stop` ends it at
  once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import ray
from pydantic import BaseModel

from harness.driver.pool import (
    AgentPool,
    flush_on_signal,
    hub_name,
    spawn_pool_actors,
    worker_name,
)
from harness.driver.startup import changed_modules
from harness.errors import RunAborted, one_line
from harness.files import replace_atomically

WARM_NAMESPACE = "harness-warm"
"""The Ray namespace of the warm pool's actors, and of a command using them (names resolve in it)."""
KEEPER = "harness-warm keeper"
RENEW_S = 5.0
LEASE_TIMEOUT_S = 30.0
KEEPERS_CODE = ("harness.driver.warm_pool", "harness.driver.pool", "harness.driver.startup")
"""What runs in the keeper itself: the actors it starts import their classes afresh (Ray sends a class
by reference), so only an edit of these makes the keeper stale."""


class WarmState(BaseModel):
    """The state file of a running warm pool (`ray.warm_pool`), written by its keeper's process."""

    address: str
    pid: int
    """The keeper's process (`python -m harness.warm serve`), which started the pool's Ray."""
    started: float
    """Its creation time (psutil's), so that a reused pid is not taken for it."""
    workers: int
    idle_minutes: float
    python: str
    pythonpath: str
    cwd: str
    dashboard: str | None = None
    generation: int = 0
    ready: bool = False
    """Whether the generation's actors all answered: the next command starts on them at once."""
    holder: str | None = None
    idle_s: float = 0.0


def read_state(path: Path) -> WarmState | None:
    """The state of the warm pool at `path`, if one runs (its process is alive)."""
    try:
        state = WarmState.model_validate_json(path.read_text())
        process = psutil.Process(state.pid)
        if abs(process.create_time() - state.started) < 1.0 and process.status() != psutil.STATUS_ZOMBIE:
            return state
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def write_state(path: Path, state: WarmState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda partial: partial.write_text(state.model_dump_json(indent=1)))


def usable_state(path: Path) -> WarmState:
    """The warm pool a command may attach to; RunAborted, in one line, where there is none, or where
    its processes would import other code than this command (another Python, PYTHONPATH or
    directory: Ray's workers find the code where the pool was started)."""
    state = read_state(path)
    if state is None:
        raise RunAborted(f"ray.address=warm: no warm pool runs here ({path} names none alive); start one "
                         "with: python -m harness.warm start; nothing was run")
    here = (sys.executable, os.environ.get("PYTHONPATH", ""), os.getcwd())
    there = (state.python, state.pythonpath, state.cwd)
    if here != there:
        differs = ", ".join(f"{what} {b!r} (here {a!r})" for what, a, b
                            in zip(("Python", "PYTHONPATH", "directory"), here, there, strict=True) if a != b)
        raise RunAborted(f"ray.address=warm: the warm pool at {path} was started with {differs}, so its "
                         "workers would run other code; stop it (python -m harness.warm stop) and start it "
                         "from here; nothing was run")
    return state


@dataclass(frozen=True)
class Grant:
    """A leased generation: its pool's name (its actors are named after it, in WARM_NAMESPACE)."""

    generation: int
    name: str
    workers: int
    note: str | None = None


@dataclass
class Lease:
    """Who holds the warm pool, and since when it was last renewed (monotonic seconds); and its
    guests, the commands on its Ray that it could not lease to (they run workers of their own)."""

    holder: str | None = None
    renewed: float = 0.0
    released: float = 0.0
    """When the last lease or visit ended (or the pool started): the idle time counts from it."""
    guests: dict[str, float] = field(default_factory=dict)
    """Guest -> when it last renewed its visit."""

    def take(self, holder: str, now: float) -> str | None:
        """None when `holder` now holds it, else why not."""
        if self.holder is not None and not self.expired(now):
            return f"another command holds it ({self.holder})"
        self.holder, self.renewed = holder, now
        return None

    def renew(self, holder: str, now: float) -> bool:
        if holder in self.guests:
            self.guests[holder] = now
            return True
        if self.holder != holder:
            return False
        self.renewed = now
        return True

    def visit(self, guest: str, now: float) -> None:
        """`guest` runs on the pool's Ray without its generation: the pool is in use until it leaves."""
        self.guests[guest] = now

    def leave(self, guest: str, now: float) -> None:
        if self.guests.pop(guest, None) is not None:
            self.released = max(self.released, now)

    def give_back(self, holder: str, now: float) -> bool:
        if self.holder != holder:
            return False
        self.holder, self.released = None, now
        return True

    def expired(self, now: float) -> bool:
        return self.holder is not None and now - self.renewed > LEASE_TIMEOUT_S

    def idle_s(self, now: float) -> float:
        for guest, renewed in list(self.guests.items()):
            if now - renewed > LEASE_TIMEOUT_S:  # its command was killed
                self.leave(guest, renewed)
        return 0.0 if self.holder is not None or self.guests else now - self.released


class WarmKeeper:
    """Keeps the next generation of pool actors started, and leases it to one command at a time.
    It owns them: they end with it, and it ends with the process that started the pool."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._generation = 0
        self._ready = 0
        """The last generation whose every actor answered (its imports paid)."""
        self._actors: list[Any] = self._spawn()
        self._lease = Lease(released=time.monotonic())
        self._granting = False
        """A lease is being granted (its generation awaited): its holder cannot renew it yet."""

    @property
    def _name(self) -> str:
        return f"harness-warm-{self._generation}"

    def _spawn(self) -> list[Any]:
        """The next generation's actors (limits, hub, workers), started; noted ready once they answer."""
        self._generation += 1
        limits, hub, workers = spawn_pool_actors(self._name, self._size, load_litellm=True)
        actors = [limits, hub, *workers]
        with contextlib.suppress(RuntimeError):  # no event loop yet: the constructor's; `start` waits
            asyncio.get_running_loop().create_task(self._note_ready(self._generation, actors))
        return actors

    async def _note_ready(self, generation: int, actors: list[Any]) -> None:
        with contextlib.suppress(ray.exceptions.RayError):  # killed before it was ready
            await _answered(actors)
            self._ready = max(self._ready, generation)

    def _replace(self) -> None:
        """Kill the generation (with whatever it still runs) and start the next."""
        for actor in self._actors:
            ray.kill(actor)
        self._actors = self._spawn()

    async def ready(self) -> None:
        await _answered(self._actors)

    async def start(self) -> None:
        """Once its first generation is ready: the idle time counts from here."""
        await self.ready()
        self._ready = self._generation
        self._lease.released = time.monotonic()

    async def lease(self, holder: str) -> Grant | str:
        """The generation for `holder`, ready, its code checked; or why it cannot have it (and
        `holder`, which then starts workers of its own on this Ray, is the pool's guest)."""
        granted = await self._grant(holder)
        if isinstance(granted, str):
            self._lease.visit(holder, time.monotonic())
        return granted

    async def _grant(self, holder: str) -> Grant | str:
        await self.status()
        refused = self._lease.take(holder, time.monotonic())
        if refused is not None:
            return refused
        self._granting = True
        try:
            ours = changed_modules(None, KEEPERS_CODE)
            if ours:
                self._lease.give_back(holder, time.monotonic())
                return (f"its keeper runs older code ({ours[0]} changed since); restart it: "
                        "python -m harness.warm stop, then start")
            note = None
            await self.ready()
            changed = sorted({path for found in await asyncio.gather(
                *(actor.__ray_call__.remote(changed_modules) for actor in self._actors)) for path in found})
            if changed:
                self._replace()
                await self.ready()
                note = f"the warm pool's workers were older than {changed[0]}: started new ones"
        except BaseException:
            self._lease.give_back(holder, time.monotonic())
            raise
        finally:
            self._granting = False
        self._lease.renew(holder, time.monotonic())
        return Grant(self._generation, self._name, self._size, note)

    def renew(self, holder: str) -> bool:
        return self._lease.renew(holder, time.monotonic())

    def leave(self, guest: str) -> None:
        """A guest's command is done with the pool's Ray."""
        self._lease.leave(guest, time.monotonic())

    async def release(self, holder: str) -> None:
        """The command is done with its generation: the next one starts now, once the command has its
        answer (starting it takes the keeper about a second)."""
        if self._lease.give_back(holder, time.monotonic()):
            asyncio.get_running_loop().call_soon(self._replace)

    async def status(self) -> dict[str, Any]:
        """Takes back a lease its holder stopped renewing; the pool's generation, holder, idle time."""
        now = time.monotonic()
        if self._lease.expired(now) and not self._granting:
            self._lease.give_back(self._lease.holder or "", now)
            self._replace()
        return {"generation": self._generation, "ready": self._ready == self._generation,
                "holder": self._lease.holder, "idle_s": self._lease.idle_s(now)}


async def _answered(actors: list[Any]) -> None:
    """Once every one of `actors` has answered (its constructor, and so its imports, done)."""
    await asyncio.gather(*(actor.__ray_ready__.remote() for actor in actors))


def lease_warm_pool(stack: contextlib.ExitStack, num_workers: int | None,
                    agent_runs: int | None) -> AgentPool | None:
    """The warm pool's generation for a command with `ray.address=warm` (harness/driver/session.py
    `start_pool`), given back when `stack` closes; None (said in one line) when another command holds
    it, and the command starts workers of its own."""
    holder = f"pid {os.getpid()} {uuid.uuid4().hex[:6]}"
    try:
        keeper = ray.get_actor(KEEPER, namespace=WARM_NAMESPACE)
        grant = ray.get(keeper.lease.remote(holder))
    except (ValueError, ray.exceptions.RayError) as error:  # its keeper is gone: the pool is stopping
        raise RunAborted(f"ray.address=warm: the warm pool did not answer ({one_line(error, 200)}); see "
                         "python -m harness.warm status; nothing was run") from None
    done = threading.Event()  # a lease, or a guest's visit (the pool stays up for it), is renewed
    renewing = threading.Thread(target=_renew, args=(keeper, holder, done), daemon=True, name="warm lease")
    renewing.start()
    guest = isinstance(grant, str)

    def give_back() -> None:
        done.set()
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get((keeper.leave if guest else keeper.release).remote(holder), timeout=30)

    stack.callback(give_back)
    if isinstance(grant, str):
        print(f"the warm pool is not used: {grant}; this command starts workers of its own", flush=True)
        return None
    hub = ray.get_actor(hub_name(grant.name))
    flush_on_signal(hub, stack)
    size = min(n for n in (num_workers, agent_runs, grant.workers) if n)
    if grant.note:
        print(grant.note, flush=True)
    print(f"on the warm pool: generation {grant.generation}, {size} agent workers", flush=True)
    return AgentPool(grant.name, hub, [ray.get_actor(worker_name(grant.name, i)) for i in range(size)], ())


def _renew(keeper: Any, holder: str, done: threading.Event) -> None:
    while not done.wait(RENEW_S):
        with contextlib.suppress(Exception):  # the keeper's status says what became of the lease
            ray.get(keeper.renew.remote(holder), timeout=RENEW_S)
