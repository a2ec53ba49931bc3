"""The peers of ``bench_peers`` as their users run them, and how a returned prompt is judged.

Each peer takes an agent's turns as its users hold them: budgeter's engine (append + build), a list
trimmed by dropping the oldest message while an exact count (transformers, or llama.cpp over HTTP)
says it is over, LangChain ``trim_messages`` over its own messages, LiteLLM ``trim_messages`` over the
history. ``hf_count`` (over ``as_served``) and ``pairs_kept`` judge what each returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from budgeter.core import Engine, Policy
from budgeter.core.messages import from_openai_list, to_openai
from tests.bench.bench_engine import _to_openai
from tests.bench.bench_service import turns
from tests.bench.corpus import HELD_OUT
from tests.bench.sessions import make_session
from tests.bench.worded import worded_session

Dicts = list[dict[str, Any]]
LITELLM_MODEL = "hosted_vllm/Qwen/Qwen3-8B"  # how a vLLM-served Qwen is named to LiteLLM


def session(seed: int, chars: int, *, synthetic: bool = False) -> dict[str, Any]:
    """A held-out session without its closing "Done." (every prompt then asks for a reply); with
    ``synthetic``, a ``tests.bench.sessions`` one (it holds tool calls cut mid-arguments)."""
    body = make_session(seed, chars=chars) if synthetic else worded_session(HELD_OUT, seed, chars=chars)
    msgs = body["messages"]
    if msgs[-1]["role"] == "assistant" and not msgs[-1].get("tool_calls"):
        msgs = msgs[:-1]
    return {"messages": [{k: v for k, v in m.items() if k != "finish_reason"} for m in msgs],
            "tools": body["tools"]}


def hf_count(tok: Any, msgs: Dicts, tools: Dicts) -> int:
    """The exact count: the folder's chat template and tokenizer, a generation prompt unless the
    prompt ends with the assistant's (a prefill)."""
    out = tok.apply_chat_template(msgs, tools=tools or None, tokenize=True,
                                  add_generation_prompt=msgs[-1]["role"] != "assistant")
    return len(out["input_ids"] if isinstance(out, Mapping) else out)


def as_served(msgs: Dicts) -> Dicts:
    """The messages as vLLM and llama.cpp hand them to the template: tool-call arguments parsed
    into objects where they parse (the template then renders them with ``tojson``)."""
    def parsed(call: dict[str, Any]) -> dict[str, Any]:
        try:
            args = json.loads(call["function"]["arguments"])
        except (TypeError, ValueError):
            return call
        return {**call, "function": {**call["function"], "arguments": args}} if isinstance(args, dict) else call
    return [{**m, "tool_calls": [parsed(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in msgs]


def pairs_kept(msgs: Dicts) -> bool:
    """Every tool result follows its call (in the assistant message before the results) and every
    call has its result."""
    pending: set[str] = set()
    for m in msgs:
        if m["role"] == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        pending = {c["id"] for c in m.get("tool_calls") or ()}
    return not pending


class Peer:
    """A peer's turn: ``catch_up`` (untimed) with the history before the measured turns, then
    ``turn(history, new)`` timed, returning what ``prompt`` turns into the OpenAI dicts it sends."""

    name = ""
    errors = 0

    def catch_up(self, body: dict[str, Any], history: Dicts) -> None: ...

    def turn(self, history: Dicts, new: Dicts) -> Any:
        raise NotImplementedError

    def prompt(self, result: Any) -> Dicts | None:
        return result  # type: ignore[no-any-return]


class EnginePeer(Peer):
    name = "budgeter engine (append + build)"

    def __init__(self, counter: Any, policy: Policy) -> None:
        self.counter, self.policy = counter, policy

    def catch_up(self, body: dict[str, Any], history: Dicts) -> None:
        self.engine = Engine(self.counter, policy=self.policy, tools=body["tools"])
        for t in turns(history):
            self.engine.append(from_openai_list(t))
            self.engine.build()

    def turn(self, history: Dicts, new: Dicts) -> Any:
        self.engine.append(from_openai_list(new))
        return self.engine.build()

    def prompt(self, result: Any) -> Dicts:
        return [to_openai(m) for m in result.messages]


class DropOldest(Peer):
    """What a user writes: hold a list, append, and drop the oldest message after the system one
    while ``count`` says it is over (or raises)."""

    def __init__(self, name: str, count: Callable[[Dicts, Dicts], int], budget: int) -> None:
        self.name, self.count, self.budget = name, count, budget

    def fits(self, msgs: Dicts) -> bool:
        try:
            return self.count(msgs, self.tools) <= self.budget
        except Exception:
            self.refused = True
            return False

    def catch_up(self, body: dict[str, Any], history: Dicts) -> None:
        self.tools = body["tools"]
        lo, hi = 1, len(history)  # the longest tail that fits, found by halving (untimed)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.fits(history[:1] + history[mid:]) else (mid + 1, hi)
        self.held = history[:1] + history[lo:]

    def turn(self, history: Dicts, new: Dicts) -> Any:
        self.refused = False
        self.held += new
        while len(self.held) > 1 and not self.fits(self.held):
            del self.held[1]
        self.errors += self.refused
        return list(self.held)


class LangChainPeer(Peer):
    def __init__(self, name: str, counter: Any, budget: int) -> None:
        self.name, self.counter, self.budget = name, counter, budget

    def catch_up(self, body: dict[str, Any], history: Dicts) -> None:
        self.held: list[Any] = []
        self.errors += self.add(history)

    def add(self, msgs: Dicts) -> int:
        """Converts and holds ``msgs``; how many LangChain refused (cut tool-call arguments)."""
        from langchain_core.messages import convert_to_messages

        refused = 0
        for m in msgs:
            try:
                self.held += convert_to_messages([m])
            except Exception:
                refused += 1
        return refused

    def turn(self, history: Dicts, new: Dicts) -> Any:
        self.errors += self.add(new)  # conversion happens as messages arrive: untimed
        return self._trim()

    def _trim(self) -> Any:
        from langchain_core.messages.utils import trim_messages

        return trim_messages(self.held, max_tokens=self.budget, token_counter=self.counter, strategy="last",
                             start_on="human", end_on=("human", "tool"), include_system=True, allow_partial=False)

    def prompt(self, result: Any) -> Dicts:
        return _to_openai(result)


def docs_counter(tok: Any) -> Callable[[list[Any]], int]:
    """The counter of LangChain's trim_messages how-to (3 tokens of priming, then role and content
    with 3 tokens of framing per message), over the HF tokenizer."""
    def count(messages: list[Any]) -> int:
        n = 3
        for m in messages:
            text = m.content if isinstance(m.content, str) else json.dumps(m.content)
            n += 3 + len(tok.encode(m.type, add_special_tokens=False)) + len(tok.encode(text, add_special_tokens=False))
        return n
    return count


class LiteLLMPeer(Peer):
    name = "LiteLLM trim_messages (its counter)"

    def __init__(self, budget: int) -> None:
        from litellm.utils import trim_messages

        self.trim, self.budget = trim_messages, budget

    def turn(self, history: Dicts, new: Dicts) -> Any:
        try:
            return self.trim(history, model=LITELLM_MODEL, max_tokens=self.budget)
        except Exception:
            self.errors += 1
            return None


def litellm_peer(budget: int) -> LiteLLMPeer | str:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    try:
        return LiteLLMPeer(budget)
    except ImportError as exc:
        return f"LiteLLM: not installed ({exc}); pip install litellm"


@contextlib.contextmanager
def llamacpp_peer(folder: Path, budget: int, skip: bool) -> Iterator[Peer | str]:
    from tests import llamacpp

    reason = "--no-llamacpp" if skip else llamacpp.skip_reason()
    if reason:
        yield f"llama.cpp: skipped ({reason})"
        return
    with tempfile.TemporaryDirectory() as tmp:
        gguf = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(folder), Path(tmp) / "tiny.gguf")
        with llamacpp.serve(gguf) as url:
            def count(msgs: Dicts, tools: Dicts) -> int:
                return len(llamacpp.tokenize(url, llamacpp.apply_template(url, msgs, tools)))
            yield DropOldest("llama.cpp /apply-template + /tokenize (HTTP)", count, budget)
