"""ScienceWorld: multi-step science experiments in a text simulator (the benchmark CLIN was run on).

The simulator is a Scala jar shipped in the `scienceworld` package and driven through py4j, so it
needs Java (17+ here); without it, or without the package, the env fails at construction with one
line saying what to install. Task types are ScienceWorld's 30 task names (the families); each
contributes `variations_per_task` variations of one split (train/dev/test), drawn by `seed`. The
split table is built in (measured from scienceworld 1.2.3; another version is measured once and
cached), so listing the pool starts no JVM.

Every episode runs in a JVM of its own, started fresh and stopped when the episode ends. Two
simulators in one JVM do stay independent, but they share the JVM's identity hashes, which order
the objects a room lists and number the choices of an ambiguous command: reusing a JVM changes
what the agent sees. A fresh JVM gives the same observations for the same actions every time. A JVM
takes 1.2-1.5 s to start, so a few (`warm_jvms`) are started ahead in a background thread. An
episode kills its JVM when it ends, is closed or is garbage-collected; and a JVM reads its stdin
and exits when the pipe closes, which happens when its Python process dies in any way (kill -9
included), so none outlives the process that started it.

The observation is the simulator's text (the task description first), then the action templates
and the objects in view (all valid commands, several hundred to several thousand, would swamp the
prompt). The first line of a reply is the command. Success is the simulator's own completion; the
score is its score over 100, a failed task (score -100) counting 0. An episode ends on completion,
on failure or after `max_steps` actions.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from envs.base import EnvEpisode, Environment, Score, StepResult, Task

MIN_JAVA = 17
INSTALL_JAVA = "apt-get install openjdk-17-jre-headless"
SPLITS = ("train", "dev", "test")
SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                   "noElectricalAction")
# Measured from scienceworld 1.2.3 (tests check it against the simulator): per task type, its
# variations, where train ends and where dev ends; each split is a contiguous range.
TABLE_VERSION = "1.2.3"
VARIATIONS: dict[str, tuple[int, int, int]] = {
    "boil": (30, 14, 21),
    "change-the-state-of-matter-of": (30, 14, 21),
    "chemistry-mix": (32, 16, 24),
    "chemistry-mix-paint-secondary-color": (36, 18, 27),
    "chemistry-mix-paint-tertiary-color": (36, 18, 27),
    "find-animal": (300, 150, 225),
    "find-living-thing": (300, 150, 225),
    "find-non-living-thing": (300, 150, 225),
    "find-plant": (300, 150, 225),
    "freeze": (30, 14, 21),
    "grow-fruit": (126, 62, 93),
    "grow-plant": (126, 62, 93),
    "identify-life-stages-1": (14, 6, 9),
    "identify-life-stages-2": (10, 4, 6),
    "inclined-plane-determine-angle": (168, 84, 126),
    "inclined-plane-friction-named-surfaces": (1386, 692, 1038),
    "inclined-plane-friction-unnamed-surfaces": (162, 80, 120),
    "lifespan-longest-lived": (125, 62, 93),
    "lifespan-longest-lived-then-shortest-lived": (125, 62, 93),
    "lifespan-shortest-lived": (125, 62, 93),
    "measure-melting-point-known-substance": (436, 218, 327),
    "measure-melting-point-unknown-substance": (300, 150, 225),
    "melt": (30, 14, 21),
    "mendelian-genetics-known-plant": (120, 60, 90),
    "mendelian-genetics-unknown-plant": (480, 240, 360),
    "power-component": (20, 10, 15),
    "power-component-renewable-vs-nonrenewable-energy": (20, 10, 15),
    "test-conductivity": (900, 450, 675),
    "test-conductivity-of-unknown-substances": (600, 300, 450),
    "use-thermometer": (540, 270, 405),
}
# A heap cap keeps a JVM's memory bounded (uncapped, its heap grows on a long episode); one GC thread
# and C1 only cost the least CPU for runs this short.
JAVA_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')
_HIDDEN_TEMPLATES = {"reset task"}  # resets the goal progress mid-episode: not a move to offer


@lru_cache(maxsize=8)
def java_major(java: str) -> int | None:
    """The major version of this `java` binary (8 for "1.8.0_292"), None when it does not say."""
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(shown.stderr + shown.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def requirements() -> str:
    """The `java` to run, after checking the package and Java 17+; ValueError saying what is missing."""
    if find_spec("scienceworld") is None:
        raise ValueError(f"env=scienceworld needs the scienceworld package; install it, e.g. "
                         f"pip install scienceworld=={TABLE_VERSION}")
    java = shutil.which("java")
    if java is None:
        raise ValueError(f"env=scienceworld needs Java {MIN_JAVA}+ (java not found on PATH); install it, "
                         f"e.g. {INSTALL_JAVA}")
    major = java_major(java)
    if major is None or major < MIN_JAVA:
        found = "could not read its version" if major is None else f"found Java {major}"
        raise ValueError(f"env=scienceworld needs Java {MIN_JAVA}+ ({found} at {java}); install it, "
                         f"e.g. {INSTALL_JAVA}")
    return java


class Simulator:
    """One ScienceWorld simulator in a JVM of its own (py4j picks free ports on both sides)."""

    def __init__(self, java: str, options: Sequence[str] = JAVA_OPTIONS) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        try:
            # die_on_exit: the JVM exits when its stdin closes, i.e. when this process is gone.
            port, process = launch_gateway(classpath=JAR_PATH, javaopts=list(options), die_on_exit=True,
                                           java_path=java, cwd=BASEPATH, return_proc=True)
        except ValueError:  # py4j read no port: the JVM exited at once (a bad option, say)
            raise RuntimeError(f"the ScienceWorld JVM did not start ({java} {' '.join(options)})") from None
        self.pid: int = process.pid
        # Each JVM lives for one episode: releasing Java objects as their proxies die is not worth
        # it, and a proxy collected after its JVM has stopped would log a connection error.
        gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, enable_memory_management=False),
                              java_process=process)
        self._stop = weakref.finalize(self, _stop_jvm, gateway, process)
        try:
            self.server: Any = gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self._stop()


def _stop_jvm(gateway: Any, process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        gateway.close()
    # Nothing in a simulator needs an orderly exit, which takes a third of a second; a kill, 20 ms.
    process.kill()
    process.wait()
    with contextlib.suppress(OSError):
        process.stdin.close()  # type: ignore[union-attr]


class ScienceWorldEpisode(EnvEpisode):
    multi_step = True

    def __init__(self, task: Task, simulator: Simulator, simplifications: str, max_steps: int,
                 max_objects: int) -> None:
        super().__init__(task)
        self._simulator: Simulator | None = simulator
        self.pid = simulator.pid
        self.max_steps = max_steps
        self._max_objects = max_objects
        server = simulator.server
        try:
            server.load(task.metadata["task_type"], int(task.metadata["variation"]), simplifications, False)
            server.reset()
            look = server.step("look around")  # the wrapper's reset does the same; not an agent step
            self._description = str(server.getTaskDescription()).strip()
            self._templates = [t for t in server.getPossibleActions() if t not in _HIDDEN_TEMPLATES]
            self._objects = list(server.getPossibleObjects())
            # Some optional subgoals hold from the start (8 points for a room with an open door in
            # `easy`): the score has them, rewards count only what the actions change.
            self._raw_score = round(100 * float(server.getScore()))
        except BaseException:
            self.close()
            raise
        self._text = f"{self._description}\n\n{str(look).strip()}"
        self._completed = False
        self.steps = 0

    @property
    def observation(self) -> str:
        objects = self._objects[:self._max_objects]
        more = f" (and {len(self._objects) - len(objects)} more)" if len(self._objects) > len(objects) else ""
        return (f"{self._text}\n\nValid actions: {', '.join(self._templates)}\n"
                f"OBJ is one of: {', '.join(objects)}{more}\n"
                "Reply with exactly one action.")

    def step(self, action: str) -> StepResult:
        if self.done or self._simulator is None:
            raise RuntimeError(f"episode of task {self._task.task_id} is already done")
        server = self._simulator.server
        command = next((line.strip() for line in action.splitlines() if line.strip()), "look around")
        self._text = str(server.step(command.strip(" .\"'`>"))).strip()
        raw = round(100 * float(server.getScore()))
        self._completed = bool(server.getCompleted())
        reward = (max(raw, 0) - max(self._raw_score, 0)) / 100
        self._raw_score = raw
        self.steps += 1
        # A negative score is ScienceWorld's failure (focusing on the wrong thing, say): it is over.
        self.done = self._completed or raw < 0 or self.steps >= self.max_steps
        self._objects = list(server.getPossibleObjects())
        if self.done:  # trials close their episodes late; the JVM's memory is not needed till then
            self.close()
        return StepResult(observation=self.observation, reward=reward, done=self.done)

    def score(self) -> Score:
        raw = self._raw_score
        state = "completed" if self._completed and raw >= 100 else "failed" if raw < 0 else "not completed"
        return Score(success=self._completed and raw >= 100, score=min(max(raw, 0), 100) / 100,
                     response=f"{self.steps} steps, score {raw}/100, {state}")

    def close(self) -> None:
        if self._simulator is not None:
            simulator, self._simulator = self._simulator, None
            simulator.stop()


class ScienceWorldTasks(Environment):
    name = "scienceworld"
    packages = ("scienceworld", "py4j")
    family_option = "task_types"
    default_families = ("find-non-living-thing",)
    interleaved_families = ("find-non-living-thing", "lifespan-longest-lived", "use-thermometer",
                            "power-component")

    def __init__(self, task_types: Sequence[str] | None = None, split: str = "train",
                 variations_per_task: int = 10, seed: int = 0, max_steps: int = 30,
                 simplifications: str = "easy", max_objects: int = 60,
                 java_options: Sequence[str] = JAVA_OPTIONS, warm_jvms: int = 2,
                 cache_dir: str = "~/.cache/harness/scienceworld") -> None:
        task_types = list(self.default_families if task_types is None else task_types)
        unknown = sorted(set(task_types) - set(VARIATIONS))
        if unknown:
            raise ValueError(f"env.task_types: unknown {unknown}; choose from {sorted(VARIATIONS)}")
        if not task_types or len(set(task_types)) < len(task_types):
            raise ValueError(f"env.task_types: at least one task type is needed, each once; got {task_types}")
        if split not in SPLITS:
            raise ValueError(f"env.split: unknown {split!r}; choose from {list(SPLITS)}")
        if variations_per_task < 1 or max_steps < 1 or max_objects < 1 or warm_jvms < 0:
            raise ValueError("env.variations_per_task, env.max_steps and env.max_objects must be >= 1, "
                             "env.warm_jvms >= 0")
        chosen = [s for s in simplifications.split(",") if s]
        wrong = sorted(set(chosen) - set(SIMPLIFICATIONS))
        if wrong:
            raise ValueError(f"env.simplifications: unknown {wrong}; a comma-separated subset of "
                             f"{list(SIMPLIFICATIONS)}")
        electrical = [t for t in task_types if "power-component" in t or "conductivity" in t]
        if "noElectricalAction" in chosen and electrical:
            raise ValueError(f"env.simplifications: noElectricalAction removes the actions {electrical} need")
        self.java = requirements()
        from scienceworld import __version__
        from scienceworld.constants import TASKS

        self.version = str(__version__)
        self.task_types = task_types
        self.split = split
        self.variations_per_task = variations_per_task
        self.seed = seed
        self.max_steps = max_steps
        self.simplifications = simplifications
        self.max_objects = max_objects
        self.java_options = tuple(java_options)
        self.warm_jvms = warm_jvms
        self.cache = Path(cache_dir).expanduser()
        self._topics = {t["task_name"]: f"{t['topic']}: {t['task']}" for t in TASKS}
        self._pool: list[Task] | None = None
        self._spares: deque[Future[Simulator]] = deque()
        self._starter: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def tasks(self) -> list[Task]:
        if self._pool is None:
            table = VARIATIONS if self.version == TABLE_VERSION else self._measured_table()
            self._pool = [self._task(t, v) for t in self.task_types for v in self._variations(t, table)]
        return self._pool

    def setup(self, tasks: list[Task]) -> None:
        if tasks:
            self._replenish()
            for spare in list(self._spares):
                spare.result()

    def reset(self, task: Task) -> EnvEpisode:
        with self._lock:
            spare = self._spares.popleft() if self._spares else None
        simulator = spare.result() if spare is not None else Simulator(self.java, self.java_options)
        try:
            return ScienceWorldEpisode(task, simulator, self.simplifications, self.max_steps,
                                       self.max_objects)
        finally:
            self._replenish()  # after the load: on two cores a JVM starting beside it slows it down

    def close(self) -> None:
        """Stop the JVMs started ahead (they would otherwise last as long as this process)."""
        with self._lock:
            spares, self._spares = list(self._spares), deque()
        for spare in spares:
            with contextlib.suppress(Exception):
                spare.result().stop()

    def _replenish(self) -> None:
        with self._lock:
            if self._starter is None and self.warm_jvms:
                self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scienceworld-jvm")
            while len(self._spares) < self.warm_jvms:
                assert self._starter is not None
                self._spares.append(self._starter.submit(Simulator, self.java, self.java_options))

    def _variations(self, task_type: str, table: dict[str, tuple[int, int, int]]) -> list[int]:
        total, train_end, dev_end = table[task_type]
        bounds = {"train": (0, train_end), "dev": (train_end, dev_end), "test": (dev_end, total)}
        low, high = bounds[self.split]
        # Seeded by the task type too: adding a type to the list leaves the others' draws alone.
        rng = random.Random(f"scienceworld:{self.seed}:{task_type}")
        return sorted(rng.sample(range(low, high), min(self.variations_per_task, high - low)))

    def _task(self, task_type: str, variation: int) -> Task:
        return Task(task_id=f"{task_type}:{variation}", family=task_type,
                    question=f"ScienceWorld task {task_type} ({self._topics.get(task_type, task_type)}), "
                             f"variation {variation} of the {self.split} split",
                    answer="complete the task (score 100)",
                    metadata={"task_type": task_type, "variation": variation})

    def _measured_table(self) -> dict[str, tuple[int, int, int]]:
        path = self.cache / f"variations-{self.version}.json"
        if path.exists():
            return {k: (v[0], v[1], v[2]) for k, v in json.loads(path.read_text()).items()}
        table = measure_variations(self.java, self.java_options)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as out:
            json.dump(table, out)
        os.replace(out.name, path)  # whole or absent: a concurrent run never reads half a table
        return table


def gold_actions(java: str, task_type: str, variation: int, simplifications: str = "easy") -> list[str]:
    """ScienceWorld's own solution of a variation (a JVM of its own: generating it is slow)."""
    simulator = Simulator(java)
    try:
        simulator.server.load(task_type, variation, simplifications, True)
        return [str(action) for action in simulator.server.getGoldActionSequence()]
    finally:
        simulator.stop()


def measure_variations(java: str, options: Sequence[str] = JAVA_OPTIONS) -> dict[str, tuple[int, int, int]]:
    """The split table of the installed scienceworld, read from the simulator (about 3 s)."""
    simulator = Simulator(java, options)
    try:
        server = simulator.server
        table = {}
        for task_type in sorted(str(t) for t in server.getTaskNames()):
            server.load(task_type, 0, "", False)
            train, dev = list(server.getVariationsTrain()), list(server.getVariationsDev())
            test = list(server.getVariationsTest())
            if train + dev + test != list(range(len(train) + len(dev) + len(test))):
                raise RuntimeError(f"scienceworld's {task_type} splits are not consecutive ranges")
            total = int(server.getTaskMaxVariations(task_type))
            table[task_type] = (total, len(train), len(train) + len(dev))
        return table
    finally:
        simulator.stop()
