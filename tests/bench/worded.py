"""Coding sessions whose tool results are worded by real tool families (``tests/data/results/``),
with what really happened known for every call.

Each session draws from the families it is given (the held-out ones, to measure): successes (the
decoys among them twice as often), and failures, each followed by what models do next: the same
call again (once or twice), the same payload fixed (a write's content to another path), the
arguments reworked while the tool's answer stays the same, or moving on. A write's or an edit's
content is 5-8K characters, as in the cases that motivated budgeter. ``truth`` says which calls
failed, which succeeded, which of those were decoys, and which calls repeat an earlier one.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from tests.bench.corpus import Entry, load
from tests.bench.sessions import _code, _html

PAYLOAD_KEYS = ("content", "file_text", "new_str", "new_string", "newString", "replace", "replacement_text",
                "diff", "input", "patch", "code")
"""Where a write's or an edit's payload stands in the families' arguments."""
JSON_TYPES = {str: "string", int: "integer", bool: "boolean", float: "number", list: "array"}


@dataclass
class Truth:
    failed: set[str] = field(default_factory=set)
    ok: set[str] = field(default_factory=set)
    decoys: set[str] = field(default_factory=set)
    retries: list[tuple[str, str]] = field(default_factory=list)
    """(earlier call, later identical call) for failures tried again as they were."""


class _Builder:
    def __init__(self, entries: list[Entry], seed: int) -> None:
        self.rng = random.Random(seed)
        self.failures = [e for e in entries if e.failed]
        self.successes = [e for e in entries if not e.failed]
        self.messages: list[dict[str, Any]] = []
        self.truth = Truth()
        self.tools: dict[str, dict[str, str]] = {}
        self.n = 0

    def call(self, e: Entry, args: dict[str, Any], text: str, *, failed: bool) -> str:
        self.n += 1
        cid = f"call_{self.n}"
        props = self.tools.setdefault(e.tool, {})
        for k, v in args.items():  # a name two families give different types to: no type
            kind = JSON_TYPES.get(type(v), "object")
            props[k] = kind if props.get(k, kind) == kind else ""
        self.messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": e.tool, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": text})
        (self.truth.failed if failed else self.truth.ok).add(cid)
        if e.decoy and not failed:
            self.truth.decoys.add(cid)
        return cid

    def payload(self, e: Entry) -> dict[str, Any]:
        args = dict(e.arguments)
        if e.op in ("write", "edit"):
            key = next((k for k in PAYLOAD_KEYS if isinstance(args.get(k), str)), None)
            if key is not None:
                rng = self.rng
                size = rng.randint(5000, 8000)
                args[key] = _html(rng, size, "Page") if rng.random() < 0.5 else _code(rng, size // 60)[:size]
        return args

    def turn(self) -> None:
        rng = self.rng
        r = rng.random()
        if r < 0.40:
            pool = self.successes + [e for e in self.successes if e.decoy]
            e = rng.choice(pool)
            self.call(e, self.payload(e), e.text, failed=False)
        elif r < 0.85:
            e = rng.choice(self.failures)
            args = self.payload(e)
            cid = self.call(e, args, e.text, failed=True)
            then = rng.random()
            if then < 0.35:
                for _ in range(rng.randint(1, 2)):
                    later = self.call(e, args, e.text, failed=True)
                    self.truth.retries.append((cid, later))
                    cid = later
            elif then < 0.60:
                fixed = self.fixed(args)
                ok = [s for s in self.successes if s.tool == e.tool and not s.decoy] or \
                    [s for s in self.successes if s.op == e.op and not s.decoy]
                if fixed is not None and ok:
                    self.call(e, fixed, rng.choice(ok).text, failed=False)
            elif then < 0.75:
                reworked = self.reworked(args)
                if reworked is not None:
                    self.call(e, reworked, e.text, failed=True)
        else:
            self.messages.append({"role": "user", "content": f"Please keep going ({rng.randint(1, 99)})."})

    def fixed(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The same payload, now with a (different) path."""
        key = next((k for k in ("path", "file_path", "filePath", "file", "filename") if k in args), None)
        if key is None:
            return None
        return {**args, key: f"src/fixed_{self.n}.py"}

    def reworked(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """Other arguments, a short one changed (the model tries something else)."""
        keys = [k for k, v in args.items() if isinstance(v, str) and len(v) < 200]
        if not keys:
            return None
        k = self.rng.choice(keys)
        return {**args, k: args[k] + " "}


def worded_session(families: tuple[str, ...], seed: int = 0, *, chars: int = 120_000) -> dict[str, Any]:
    """A chat-completions body of about ``chars`` characters, with ``truth``."""
    b = _Builder(load(families), seed)
    b.messages.append({"role": "system", "content": "You are a careful coding agent. Use the tools."})
    b.messages.append({"role": "user", "content": "Fix the failing build and add the landing page."})
    while sum(len(json.dumps(m, ensure_ascii=False)) for m in b.messages) < chars:
        b.turn()
    b.messages.append({"role": "assistant", "content": "Done."})
    tools = [{"type": "function", "function": {"name": name, "description": f"The {name} tool", "parameters": {
        "type": "object", "properties": {k: {"type": t} if t else {} for k, t in props.items()}}}}
        for name, props in sorted(b.tools.items())]
    return {"messages": b.messages, "tools": tools, "truth": b.truth}
