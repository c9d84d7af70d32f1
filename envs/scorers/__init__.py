"""Scorers: how a reply to a single-turn task is scored, one registry for every environment.

A scorer is one class in one module of this package (or of any importable module, named as
`package.module:Class`): it derives from `Scorer`, says its name (`Scorer.name`), and turns a reply
and the task into a `Verdict` (a score in [0, 1], whether it counts as a success, the answer it read
and a one-line reason, which lands in attempts.score_reason). A new scorer needs no edit elsewhere:
`scorer(name)` finds it by importing this package's modules. A reply a scorer cannot read is a
failed verdict with its reason, never an exception; a reference it cannot read is refused before
the run starts (`Scorer.check_reference`, a ValueError naming what is wrong).

Configs name a scorer as a string (`exact`) or a mapping with its options
(`{name: numeric, tolerance: 0.01}`).

A name belongs to one scorer: a class that claims a name another definition holds is refused as it
is defined, with a ValueError naming the name and both classes (as lancedb's registry refuses a
second alias), so a scorer of one's own called `exact` can never silently replace the built-in. A
class defined outside this package first has the package's scorers imported, so that it meets the
built-ins whichever is imported first; the same definition again (its module imported anew, by a
reload or in another process) replaces itself.
"""

from __future__ import annotations

import abc
import importlib
import pkgutil
from typing import Any, ClassVar

from envs.base import Checks, Task, Verdict, normalize

__all__ = ["Scorer", "SettlingScorer", "Verdict", "require_text", "scorer", "scorer_class"]


class Scorer(abc.ABC):
    """Scores replies to single-turn tasks. Options are the constructor's keyword arguments."""

    name: ClassVar[str]
    registry: ClassVar[dict[str, type[Scorer]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _register(cls)

    packages: ClassVar[tuple[str, ...]] = ()
    """The pip distributions it imports beyond the core's (math: math-verify): a job whose env names it
    checks that they are installed before it starts (harness/extras.py)."""
    blocking: ClassVar[bool] = False
    """Its `score` can take seconds (a query, a helper process): the episode scores the reply in a
    thread at `settle`, off the event loop that the worker's other agent runs and their model calls
    share, so a slow verdict stops no other run's clock."""

    @abc.abstractmethod
    def score(self, reply: str, task: Task) -> Verdict:
        """The verdict on `reply` (the model's whole reply) to `task`; never raises on the reply."""

    def check_reference(self, task: Task) -> None:  # noqa: B027 - optional hook
        """Refuse (ValueError, one line) a task whose reference this scorer cannot read."""


class SettlingScorer(Scorer):
    """A scorer whose verdict needs the harness (a model asked, code run): the episode records the
    reply at its step and the harness settles it (`EnvEpisode.settle`) with what it lends
    (`envs.base.Checks`)."""

    settles: ClassVar[bool] = True

    def score(self, reply: str, task: Task) -> Verdict:
        raise TypeError(f"the {self.name} scorer settles after the step: the episode scores through `settle`")

    @abc.abstractmethod
    async def settle(self, reply: str, task: Task, checks: Checks) -> Verdict:
        """The verdict on `reply`, with the run's model or the sandbox (`checks`)."""


def _register(cls: type[Scorer]) -> None:
    """Give `cls` its name, or refuse it (ValueError, one line) if another definition holds the name."""
    if not cls.__module__.startswith(f"{__name__}."):
        _import_scorers()  # the built-ins hold their names before a scorer of one's own can claim one
    held = Scorer.registry.get(cls.name)
    if held is not None and _where(held) != _where(cls):
        raise ValueError(f"scorer {cls.name!r} is defined twice: by {_where(held)} and by {_where(cls)}; "
                         "a name belongs to one scorer, so give this one another")
    Scorer.registry[cls.name] = cls


def _where(cls: type) -> str:
    """The definition of a class, as a config would name it (`package.module:Class`)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_scorers() -> None:
    """Import every module of this package, so that each of its scorers holds its name."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def require_text(task: Task, why: str = "") -> None:
    """Refuse a reference or alias that folds to nothing (`normalize`): no reply could be compared
    with it. `why` ends the message."""
    for form in (task.answer, *task.aliases):
        if not normalize(form):
            raise ValueError(f"task {task.task_id}: reference {form!r} is empty once case and punctuation "
                             f"are folded{why}")


def scorer(spec: str | dict[str, Any]) -> Scorer:
    """The scorer a config names: `"numeric"`, `{"name": "numeric", "tolerance": 0.01}` or a
    `package.module:Class` in either form. A ValueError names an unknown scorer or option."""
    options = dict(spec) if isinstance(spec, dict) else {"name": spec}
    name = options.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a scorer is a name or a mapping with one, got {spec!r}")
    cls = scorer_class(name)
    try:
        return cls(**options)
    except TypeError as error:
        raise ValueError(f"scorer {name}: {error}") from None


def scorer_class(name: str) -> type[Scorer]:
    """The class of the scorer `name` (or `package.module:Class`); a ValueError if there is none."""
    if ":" in name:
        module, _, attribute = name.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute, None)
        except ImportError as error:
            raise ValueError(f"scorer {name}: cannot import {module} ({error})") from None
        if not (isinstance(found, type) and issubclass(found, Scorer)):
            raise ValueError(f"scorer {name} is not a Scorer class")
        return found
    if name not in Scorer.registry:
        _import_scorers()
    if name not in Scorer.registry:
        raise ValueError(f"unknown scorer {name!r}: one of {', '.join(sorted(Scorer.registry))}")
    return Scorer.registry[name]
