"""The tokenizers a server offers (its tokenizer profiles): the built-ins plus NAME=SPEC pairs from the settings.

Counters are shared by every session of a profile and keep caches, so work on one counter runs
under that profile's lock (the GIL would serialise it anyway).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from budgeter.core.guards import validate_tool_call
from budgeter.core.messages import Message, ToolCall
from budgeter.core.typing import PromptCounter
from budgeter.errors import UnknownTokenizer
from budgeter.tokenizers import available, resolve
from budgeter.tokenizers.formats import check_format


@dataclass(frozen=True, slots=True)
class Offered:
    name: str
    spec: str
    description: str
    is_default: bool


class Tokenizers:
    def __init__(self, extra: Mapping[str, str] | None = None, *, default: str,
                 formats: Mapping[str, str] | None = None) -> None:
        """``formats``: profile name -> chat format (``resolve``'s ``chat_format``), checked here,
        before any profile loads."""
        builtins = available()
        self._specs = {name: name for name in builtins} | dict(extra or {})
        self._desc = {name: builtins.get(spec, spec) for name, spec in self._specs.items()}
        self.default = default
        self._locks = {name: threading.RLock() for name in self._specs}
        self.spec(default)
        self._formats = dict(formats or {})
        for name, chat_format in self._formats.items():
            self.spec(name)
            check_format(chat_format)
            self._desc[name] += f" (chat format {chat_format})"

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
        return resolve(self.spec(name), chat_format=self._formats.get(name or self.default))

    def lock(self, name: str) -> threading.RLock:
        return self._locks[self.name(name)]

    def all(self) -> list[Offered]:
        return [Offered(n, s, self._desc[n], n == self.default) for n, s in self._specs.items()]


_WARM_TOOL = {"type": "function", "function": {"name": "zqwarm", "description": "d", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


YOUNG = 10_000
"""Allocations between two collections of the youngest generation in a server process: at Python's
700, full collections walking every session's history cost a loaded replica CPU (``bench_load``)."""


def settle(tokenizers: Tokenizers, names: Iterable[str]) -> None:
    """For a server process, once at start: do what the first turns would do for the first time
    (load, render and count each profile, use the JSON Schema validator), then ``gc.freeze``
    what is alive now, so that a full collection walks only what sessions hold and is not a
    turn's p99 (``bench_service``); young objects are collected after ``YOUNG`` allocations."""
    call = ToolCall("zqc", "zqwarm", '{"path": "a"}')
    warm = [Message("system", "s"), Message("user", "u"), Message("assistant", "", tool_calls=(call,)),
            Message("tool", "ok", tool_call_id="zqc")]
    for name in names:
        counter = tokenizers.counter(name)
        with contextlib.suppress(Exception):  # a template that refuses this conversation
            counter.count_prompt(warm, [_WARM_TOOL])
    validate_tool_call(call, [_WARM_TOOL])
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
