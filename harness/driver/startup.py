"""How long a command took to get going, stage by stage (`manifest.json`'s `startup_s`), and a command
that ends without a second's wait (`end_without_collecting`).

Each stage is marked once per process, when it is first reached (a sweep's jobs share its Ray and
its pool), and reported in seconds from the creation of the command's process, so the Python
interpreter's own start and the imports are counted too.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
from collections.abc import Collection

import psutil

STAGES = ("composed", "ray", "pool", "checked")
"""The config composed and validated; Ray started or joined; the agent pool ready (its workers'
imports paid, its local servers answering); the models checked (harness/driver/preflight.py)."""

LOCAL_RAY_SYSTEM_CONFIG = {"raylet_client_connect_timeout_milliseconds": 100,
                           "raylet_client_num_connect_attempts": 100,
                           "worker_niceness": 0}
"""Ray's system config for a Ray the harness starts (harness/driver/session.py):

- as the raylet starts, its object manager connects to the object store it has just started, and
  where the store is not listening yet, waits for a retry: 1 s by Ray's default (10 attempts). Half
  the starts here waited that second (raylet.out: "ObjectManager server started" 1.0 s after the
  store's first dump; ray.init 3.6 s instead of 2.5). Retried every 100 ms, 100 times, it gives up
  after the same 10 s;
- Ray starts its worker processes at nice 15 (`worker_niceness`), so that its own raylet and GCS
  win over them. Every actor of the pool runs in one (agent workers, writer hub, model limits):
  on a quiet machine that changes nothing, but beside anything at nice 0 the kernel gives a nice-15
  process 36/1024 of a nice-0 one's share. Beside 3 busy loops on 2 cores the agent workers ran at
  4% of a core each while the loops took 39% (ps), the pool's imports took 352 s instead of 7
  (docs/bench.md, under load). At 0 they compete as the driver and the user's other work do."""

_marks: dict[str, float] = {}


def mark(stage: str) -> None:
    """`stage` is reached now, unless it was already in this process."""
    _marks.setdefault(stage, time.time())


def seconds() -> dict[str, float]:
    """Each stage reached so far: seconds from the process's creation, in the order of STAGES."""
    origin = time.time() - _age_s()
    return {stage: round(_marks[stage] - origin, 3) for stage in STAGES if stage in _marks}


def _age_s() -> float:
    """Seconds since this process was created: on Linux from its start in clock ticks since boot (to
    10 ms; psutil's create_time adds the boot time, which /proc gives in whole seconds)."""
    try:
        with open("/proc/self/stat") as stat:  # the command name may hold spaces: read after its ')'
            started = int(stat.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time() - psutil.Process().create_time()


def changed_modules(_actor: object = None, names: Collection[str] | None = None) -> list[str]:
    """Files of modules this process imported (those of `names`, if given) that changed (or went)
    since the process was created: what it runs is no longer what is on disk. A warm pool's actors
    are asked through `__ray_call__` (harness/driver/warm_pool.py), so this module imports nothing
    heavy."""
    created = time.time() - _age_s()
    changed = []
    modules = (list(sys.modules.values()) if names is None
               else [sys.modules[name] for name in names if name in sys.modules])
    for module in modules:
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not path.endswith((".py", ".so")):
            continue
        try:
            if os.stat(path).st_mtime > created:
                changed.append(path)
        except OSError:
            changed.append(path)
    return sorted(changed)


def end_without_collecting() -> None:
    """At this process's exit, leave the objects in memory to the OS instead of Python's final garbage
    collection, which took 1.0-1.1 s of a command's end here (py-spy: the interpreter's
    `gc_collect_main` with no Python frame above it, over litellm's, Ray's and polars' objects): the
    heap is frozen (`gc.freeze`) by an exit handler, and the collections at exit pass over it. Every
    exit handler still runs, before it or after it (Ray's shutdown, logging's flush); an object left
    in a reference cycle is not finalised. Nothing is lost: the tables were closed by the writer
    actor, the manifest written; logging flushes its handlers, and the interpreter standard output
    and error."""
    atexit.register(gc.freeze)
