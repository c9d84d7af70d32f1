"""Country facts: single-turn questions with exact answers, from the `countryinfo` package's data.

The data (MIT-licensed, ~250 countries and territories) ships inside the pip package, so the task
pool is real, offline and reproducible. Each family asks one fact per country; a country lacking
that fact is left out of that family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from envs.base import EnvEpisode, Environment, SingleTurnEpisode, Task
from envs.scorers import scorer as make_scorer

CountryRecord = dict[str, Any]


def _first(values: Sequence[str] | None) -> str | None:
    return values[0] if values else None


class Family(NamedTuple):
    question: str
    read_answer: Callable[[CountryRecord], str | None]
    answer_pattern: str | None = None
    """Sentence form also accepted, e.g. "The capital city of France is Paris." -> "Paris"."""


FAMILIES: dict[str, Family] = {
    "capital": Family(
        "What is the capital city of {name}? Reply with the city name only.",
        lambda c: c.get("capital"),
        r"(?:the )?capital(?: city)? of .+? is (?:called )?(?P<answer>.+?)\.?",
    ),
    "region": Family(
        "On which continent is {name}: Africa, Americas, Asia, Europe or Oceania? "
        "Reply with one of those five words only.",
        lambda c: c.get("region"),
    ),
    "demonym": Family(
        "What is the demonym for people from {name} (e.g. French for France)? "
        "Reply with the demonym only.",
        lambda c: c.get("demonym"),
    ),
    "currency_code": Family(
        "What is the ISO 4217 three-letter code of the currency of {name}? Reply with the code only.",
        lambda c: _first(c.get("currencies")),
    ),
    "calling_code": Family(
        "What is the international calling code of {name}, without the plus sign? "
        "Reply with the digits only.",
        lambda c: _first(c.get("callingCodes")),
    ),
}


class CountryFacts(Environment):
    packages = ("countryinfo",)
    family_option = "families"
    default_families = ("capital",)
    interleaved_families = tuple(FAMILIES)

    def __init__(self, families: Sequence[str] | None = None) -> None:
        families = self.default_families if families is None else families
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"env.families: unknown {unknown}; choose from {sorted(FAMILIES)}")
        if not families:
            raise ValueError("env.families: at least one family is needed")
        self.families = list(families)
        self.scorer = make_scorer("exact")
        self._pool: list[Task] | None = None

    def tasks(self) -> list[Task]:
        if self._pool is None:
            self._pool = [task for family in self.families for task in self._family_tasks(family)]
        return self._pool

    def reset(self, task: Task) -> EnvEpisode:
        return SingleTurnEpisode(task, self.scorer)

    def _family_tasks(self, family: str) -> list[Task]:
        spec = FAMILIES[family]
        tasks = []
        for country in _countries():
            answer = spec.read_answer(country)
            if not answer:
                continue
            tasks.append(Task(
                task_id=f"{family}:{country['ISO']['alpha3']}",
                family=family,
                question=spec.question.format(name=country["name"]),
                answer=answer,
                answer_pattern=spec.answer_pattern,
            ))
        return tasks


def _countries() -> list[CountryRecord]:
    from countryinfo import CountryInfo

    # Entries without an ISO alpha-3 code are historical or disputed areas (e.g. "Burma" beside
    # Myanmar); they would duplicate questions, so the pool keeps ISO countries only.
    records = [c for c in CountryInfo.all().values() if c.get("ISO", {}).get("alpha3")]
    by_code = {c["ISO"]["alpha3"]: c for c in records}
    return [by_code[code] for code in sorted(by_code)]
