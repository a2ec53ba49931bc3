"""What an inference server adds to a chat template's context, so a count matches its render.

The same published template renders different prompts on different servers, because servers pass
their own variables: llama.cpp (b11434, ``--jinja``) the reasoning switches of ``_LLAMA_CPP``
(``preserve_reasoning`` is on by default) and today's date (``DYNAMIC``), so that the Qwen3.6
template keeps every earlier turn's ``<think>`` block there; vLLM and transformers pass none, and
it drops the reasoning before the last user query. A profile names its server as ``SPEC@SERVER``
(``qwen3.6@vllm``); the default is llama.cpp, the server local agents run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from budgeter.core.memo import IdentityMemo
from budgeter.errors import InvalidTokenizerSpec
from budgeter.tokenizers.rules import Wrapped

DEFAULT_SERVER = "llama.cpp"

_LLAMA_CPP: dict[str, Any] = {
    "preserve_reasoning": True, "preserve_thinking": True, "clear_thinking": False,
    "truncate_history_thinking": False, "drop_thinking": False, "enable_thinking": True,
}

SERVERS: dict[str, Mapping[str, Any]] = {
    "llama.cpp": _LLAMA_CPP,
    "vllm": {},
    "transformers": {},
}

NORMALIZES = {"llama.cpp": False, "vllm": True, "transformers": True}
"""Whether the server applies a ``tokenizer.json``'s NFC normalizer: llama.cpp's tokenizers apply no
Unicode normalization (b11434); vLLM and transformers run the Hugging Face tokenizer's."""

PROMOTES = {"llama.cpp": True, "vllm": False, "transformers": False}
"""Whether the server matches as one token the ordinary vocabulary entries that llama.cpp's loader
makes special by their text (``promoted.py``: ``</s>`` in the Qwen2.5/Qwen3 vocabularies)."""

PREFILLS = {"llama.cpp": True, "vllm": False, "transformers": False}
"""Whether the server takes a conversation that ends with an assistant message as a prefill of that
message (no new assistant turn). llama.cpp's server does (b11434, ``prefill_assistant`` on by
default); vLLM and transformers open a new turn unless the request sets ``continue_final_message``."""

REBUILDS_TOOLS = {"llama.cpp": True, "vllm": False, "transformers": False}
"""Whether the server rebuilds each tool before the template sees it. llama.cpp's does (b11434,
``common_chat_tools_parse_oaicompat`` then ``common_chat_tools_to_json_oaicompat``): every function
tool becomes ``{"type", "function": {"name", "description", "parameters"}}`` in that order, a missing
description ``""``, missing parameters ``{}``, other keys (``strict``) dropped; the parameters are
kept as sent (``tests/tokenizers/test_llamacpp_ground_truth.py``)."""

DESCRIPTIONS = {
    "llama.cpp": "llama.cpp server --jinja (b11434 defaults: reasoning preserved in every turn)",
    "vllm": "vLLM / transformers apply_chat_template (no extra template variables)",
    "transformers": "transformers apply_chat_template (no extra template variables)",
}


def split_spec(spec: str) -> tuple[str, str | None]:
    """``"qwen3.6@vllm"`` -> ``("qwen3.6", "vllm")``; a spec without a known server suffix is
    returned whole (paths may contain ``@``)."""
    base, sep, server = spec.rpartition("@")
    if sep and base and server in SERVERS:
        return base, server
    return spec, None


def check(server: str | None) -> str:
    server = server or DEFAULT_SERVER
    if server not in SERVERS:
        raise InvalidTokenizerSpec(f"unknown server {server!r}; known: {', '.join(SERVERS)}", field="server")
    return server


def llama_cpp_tool(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """``tool`` as llama.cpp's server hands it to the template (``REBUILDS_TOOLS``)."""
    fn = tool.get("function")
    if tool.get("type") != "function" or not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        return tool  # (the server refuses it; so does budgeter's check of the tools)
    return {"type": "function", "function": {"name": fn["name"], "description": fn.get("description", ""),
                                             "parameters": fn.get("parameters", {})}}


REBUILDS = 4096
"""Tools lists whose rebuilds a format keeps: more than a replica's sessions (``live_sessions``,
512 by default), each of which hands over its own. They hold the schemas of sessions the replica
let go, so the characters of their text count against the memos' budget too (``core/memo.py``)."""


class ServerTools(Wrapped):
    """A format whose tools are rebuilt as llama.cpp's server rebuilds them before rendering. The
    same tools come on every build of a session (a new list of the same objects): their rebuild is
    kept by the objects' identities, one per session, so that the template meets the same objects
    too and what it derives from them is kept as well. One kept rebuild, the last one, made every
    build rebuild the tools, and the template write every schema out again, as soon as two
    sessions' turns interleaved: 150 of 163 builds of four interleaved sessions (``bench_load``)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._rebuilds = IdentityMemo(limit=REBUILDS, size=_chars)

    def render(self, messages: Any, tools: Any, *, add_generation_prompt: bool = True) -> str:
        return self.inner.render(messages, self._rebuilt(tools),  # type: ignore[no-any-return]
                                 add_generation_prompt=add_generation_prompt)

    def _rebuilt(self, tools: Any) -> Any:
        if not tools:
            return tools
        return self._rebuilds.get(tuple(tools), _rebuild, tools)


def _rebuild(tools: Any) -> list[Mapping[str, Any]]:
    return [llama_cpp_tool(t) for t in tools]


def _chars(rebuilt: list[Mapping[str, Any]]) -> int:
    """About the characters a rebuild holds: its text as Python writes it (once per session)."""
    return len(repr(rebuilt))


def variables(server: str) -> dict[str, Any]:
    return dict(SERVERS[server])


def _now(fmt: str) -> Callable[[], str]:
    return lambda: time.strftime(fmt)


DYNAMIC: dict[str, Mapping[str, Callable[[], Any]]] = {
    # common_chat_extra_context(): every render gets today's date in two spellings
    "llama.cpp": {"date_string": _now("%d %b %Y"), "datetime": _now("%b %d %Y")},
}


def dynamic(server: str) -> dict[str, Callable[[], Any]]:
    """Variables the server computes at each request (read by templates such as Llama 3.1's)."""
    return dict(DYNAMIC.get(server, {}))
