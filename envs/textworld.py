"""TextWorld: multi-step text games (tw-cooking, tw-coin_collector, tw-treasure_hunter), offline.

Games are generated from seeds with TextWorld's own challenge generators and compiled into
`cache_dir` (never regenerated when the file is there); the worker's `setup` builds every game its
agent runs need before they start, so generation time is set-up time, not episode time. Episodes
are played through textworld's gym interface; the observation lists the admissible commands, the
big ASCII banner of the first one is stripped. Success is winning; the score is the game score
over its maximum. An episode ends when the game does or after `max_steps` actions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.base import EnvEpisode, Environment, Score, StepResult, Task

CHALLENGES = ("tw-cooking", "tw-coin_collector", "tw-treasure_hunter")
# Lines of the ASCII-art banner are drawn with these characters only (no letters or digits).
_BANNER_LINE = re.compile(r"^\s*[$_|\\/<>()'`.,~=-][\s$_|\\/<>()'`.,~=-]*$")


def strip_banner(text: str) -> str:
    kept = [line for line in text.splitlines() if not _BANNER_LINE.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


class TextWorldEpisode(EnvEpisode):
    multi_step = True

    def __init__(self, task: Task, game_file: Path, max_steps: int) -> None:
        import textworld
        import textworld.gym

        super().__init__(task)
        infos = textworld.EnvInfos(admissible_commands=True, max_score=True, won=True, lost=True,
                                   score=True, objective=True)
        env_id = textworld.gym.register_game(str(game_file), request_infos=infos,
                                             max_episode_steps=max_steps)
        with warnings.catch_warnings():  # jericho's "not fully supported": TextWorld keeps the score itself
            warnings.filterwarnings("ignore", message=".*is not fully supported")
            self._env = textworld.gym.make(env_id)
            observation, self._info = self._env.reset()
        self._observation = strip_banner(observation)
        self._score = 0
        self.steps = 0
        self.max_steps = max_steps

    @property
    def observation(self) -> str:
        commands = ", ".join(self._info.get("admissible_commands") or [])
        return (f"{self._observation}\n\nAdmissible commands: {commands}\n"
                "Reply with exactly one command.")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"episode of task {self._task.task_id} is already done")
        command = next((line.strip() for line in action.splitlines() if line.strip()), "look")
        observation, score, game_over, self._info = self._env.step(command.strip(" .\"'`>"))
        reward = float(score - self._score)
        self._score = score
        self.steps += 1
        self._observation = observation.strip()
        self.done = bool(game_over) or self.steps >= self.max_steps
        return StepResult(observation=self.observation, reward=reward, done=self.done)

    def score(self) -> Score:
        max_score = self._info.get("max_score") or 1
        return Score(success=bool(self._info.get("won")), score=self._score / max_score,
                     response=f"{self.steps} steps, score {self._score}/{max_score}")

    def close(self) -> None:
        self._env.close()


class TextWorldGames(Environment):
    packages = ("textworld",)

    def __init__(self, challenge: str = "tw-cooking", num_games: int = 20, seed: int = 0,
                 settings: Mapping[str, Any] | None = None, max_steps: int = 30,
                 cache_dir: str = "~/.cache/harness/textworld") -> None:
        if challenge not in CHALLENGES:
            raise ValueError(f"env.challenge: unknown {challenge!r}; choose from {list(CHALLENGES)}")
        if num_games < 1 or max_steps < 1:
            raise ValueError("env.num_games and env.max_steps must be >= 1")
        self.challenge = challenge
        self.seeds = [seed + i for i in range(num_games)]
        self.settings = dict(settings or {})
        self.max_steps = max_steps
        settings_key = hashlib.sha256(json.dumps(self.settings, sort_keys=True).encode()).hexdigest()[:8]
        self.cache = Path(cache_dir).expanduser() / challenge / settings_key

    def tasks(self) -> list[Task]:
        described = ", ".join(f"{k}={v}" for k, v in sorted(self.settings.items()))
        suffix = f" ({described})" if described else ""
        return [Task(task_id=f"{self.challenge}:{seed}", family=self.challenge,
                     question=f"{self.challenge} game, seed {seed}{suffix}", answer="win the game",
                     metadata={"game_seed": seed})
                for seed in self.seeds]

    def setup(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            self.game_file(task)

    def reset(self, task: Task) -> EnvEpisode:
        return TextWorldEpisode(task, self.game_file(task), self.max_steps)

    def game_file(self, task: Task) -> Path:
        seed = int(task.metadata["game_seed"])
        path = self.cache / f"game_{seed}.z8"
        if not path.exists():
            self._generate(seed, path)
        return path

    def _generate(self, seed: int, path: Path) -> None:
        import textworld
        import textworld.challenges
        import textworld.generator

        _, make_game, add_arguments = textworld.challenges.CHALLENGES[self.challenge]
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        argv: list[str] = []
        for key, value in self.settings.items():
            flag = f"--{key.replace('_', '-')}"
            if value is True:
                argv.append(flag)
            elif value is not False:
                argv += [flag, str(value)]
        options = textworld.GameOptions()
        options.seeds = seed
        options.file_ext = ".z8"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            settings = vars(parser.parse_args(argv))
        except SystemExit:  # argparse has already printed what is wrong
            raise ValueError(f"env.settings: {self.settings} are not valid {self.challenge} settings "
                             f"(see tw-make {self.challenge} --help)") from None
        # Built in a directory of its own, then moved into the shared cache, the game file last: a
        # run (or a second test suite) on the same machine never reads a half-written game.
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".building-") as building:
            options.path = str(Path(building) / path.name)
            game = make_game(settings=settings, options=options)
            textworld.generator.compile_game(game, options)
            for built in sorted(Path(building).iterdir(), key=lambda f: f.suffix == ".z8"):
                os.replace(built, path.parent / built.name)
