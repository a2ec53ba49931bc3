"""The tokenizer profiles a server offers: the built-ins plus NAME=SPEC pairs from the settings.

Counters are shared by every session of a profile and keep caches, so work on one counter runs
under that profile's lock (the GIL would serialise it anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from budgeter.core.typing import PromptCounter
from budgeter.errors import UnknownTokenizer
from budgeter.tokenizers import available, resolve


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    spec: str
    description: str
    is_default: bool


class Profiles:
    def __init__(self, extra: Mapping[str, str] | None = None, *, default: str) -> None:
        builtins = available()
        self._specs = {name: name for name in builtins} | dict(extra or {})
        self._desc = {name: builtins.get(spec, spec) for name, spec in self._specs.items()}
        self.default = default
        self._locks = {name: threading.RLock() for name in self._specs}
        self.spec(default)

    def name(self, name: str) -> str:
        """The profile name, the default for an empty one; unknown names raise."""
        self.spec(name)
        return name or self.default

    def spec(self, name: str) -> str:
        spec = self._specs.get(name or self.default)
        if spec is None:
            raise UnknownTokenizer(
                f"unknown tokenizer profile {name!r}; this server offers: {', '.join(self._specs)}",
                metadata={"available": ",".join(self._specs), "tokenizer": name})
        return spec

    def counter(self, name: str) -> PromptCounter:
        return resolve(self.spec(name))

    def lock(self, name: str) -> threading.RLock:
        return self._locks[self.name(name)]

    def all(self) -> list[Profile]:
        return [Profile(n, s, self._desc[n], n == self.default) for n, s in self._specs.items()]
