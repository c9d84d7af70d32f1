"""What the tests of harness/driver/ray_insides.py and hydra_insides.py share: a failed reliance names
the installed version and the pin the module was written for, and that pin is pyproject's."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Insides:
    """One library's insides module: its distribution, installed version and the pin it is written for."""

    distribution: str
    version: str
    module: str
    supported: str

    def relied_on(self, holds: bool, what: str) -> None:
        assert holds, (f"{self.distribution} {self.version} ({self.module} is written for {self.supported}): "
                       f"{what} no longer holds; see that module for what it is for")

    def check_pin(self) -> None:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        [pin] = [str(p) for p in map(Requirement, project["dependencies"]) if p.name == self.distribution]
        assert Requirement(pin) == Requirement(self.supported), (
            f"pyproject.toml pins {pin}, {self.module} is written for {self.supported}: check what it relies "
            "on against the new pin (its test), then say so in SUPPORTED and docs/guarantees.md")
        self.relied_on(Requirement(self.supported).specifier.contains(self.version, prereleases=True),
                       "the installed version is the pinned one")
