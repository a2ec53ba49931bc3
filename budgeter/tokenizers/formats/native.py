"""Published chat templates rendered in plain Python, for the conversations whose shape they know.

A Jinja render walks the template's compiled code for every message: on a 32K-token prompt that is
most of a compacting build's full render, and a third of an ordinary turn's work in the session
layer (the window renders and each new message's lone render, ``bench_instructions``). A renderer
here is chosen for a template only when the template's source is the published text it was written
from, character for character (``for_template``), and it renders only what it is sure of: plain
dicts with string content, the roles the template knows, tool calls with object arguments. For
anything else (content parts, a role the template refuses, a conversation it raises on) it returns
None and the template renders it. ``JinjaFormat`` also renders a share of its conversations with the
template as well and compares (``SHADOW_FIRST``, ``SHADOW_EVERY``): a difference turns the renderer
off for that format for good. ``tests/tokenizers/test_native.py`` compares the two on generated and
held-out conversations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from budgeter.core.memo import IdentityMemo
from budgeter.tokenizers import cache

Tojson = Callable[[Any], str]
Native = Callable[[Sequence[Any], Any, bool, Mapping[str, Any], Tojson], "str | None"]

SHADOW_FIRST = 64
"""A format's first renders made here that are also rendered by the template and compared."""
SHADOW_EVERY = 256
"""After those, one render in this many is (about what the window renders' audits cost)."""
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_TEMPLATE_VARIABLES = frozenset({"messages", "tools", "add_generation_prompt"})

QWEN36_TOOLS = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>"
QWEN36_INSTRUCTIONS = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\n"
    "multiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
    "nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function "
    "call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n"
    "</IMPORTANT>"
)


def _text(m: dict[str, Any]) -> str | None:
    """``render_content(message.content)|trim`` for string or absent content; None for content
    parts or any other type (the template renders those)."""
    content = m.get("content")
    if content is None:
        return ""
    return content.strip() if type(content) is str else None


def _arguments(args: dict[str, Any], tojson: Tojson) -> str | None:
    out = []
    for name, value in args.items():
        if type(name) is not str:
            return None
        # ``args_value | tojson if args_value is mapping or (sequence and not string) else | string``
        kind = type(value)
        if kind is dict or kind is list:
            text = tojson(value)
        elif kind in _JSON_SCALARS:
            text = value if kind is str else str(value)
        else:
            return None  # (not what JSON parses to)
        out.append(f"<parameter={name}>\n{text}\n</parameter>\n")
    return "".join(out)


def _calls(calls: Any, content: str, tojson: Tojson) -> str | None:
    if type(calls) is not list:
        return None
    out = []
    for j, call in enumerate(calls):
        if type(call) is not dict:
            return None
        if "function" in call:
            call = call["function"]
            if type(call) is not dict:
                return None
        name = call.get("name")
        if type(name) is not str:
            return None
        if j:
            out.append(f"\n<tool_call>\n<function={name}>\n")
        else:
            out.append(("\n\n<tool_call>\n<function=" if content.strip() else "<tool_call>\n<function=") + name + ">\n")
        if "arguments" in call:
            args = call["arguments"]
            if type(args) is not dict:
                return None
            params = _arguments(args, tojson)
            if params is None:
                return None
            out.append(params)
        out.append("</function>\n</tool_call>")
    return "".join(out)


def _tool_block(tools: list[Any], tojson: Tojson) -> str:
    """The tools' block for ``tools``, kept by the identities of the schemas in it (not of the list:
    a session's builds hand over a new list of the same schemas where no ``ServerTools`` keeps one),
    so that each session's schemas are written out once: writing them out again was a twentieth of a
    turn (``bench_instructions``). By identity, not equality: two equal schemas with their keys in
    another order write out differently."""
    return _TOOL_BLOCKS.get((tojson, *tools), _tool_text, tools, tojson)


def _tool_text(tools: list[Any], tojson: Tojson) -> str:
    return QWEN36_TOOLS + "".join("\n" + tojson(tool) for tool in tools) + "\n</tools>" + QWEN36_INSTRUCTIONS


_TOOL_BLOCKS = IdentityMemo(size=len)


def qwen36(messages: Sequence[Any], tools: Any, add_generation_prompt: bool, variables: Mapping[str, Any],
           tojson: Tojson) -> str | None:
    """Qwen3.6's published template (``templates/qwen3.6.jinja``), or None where it does not know
    the conversation's shape or the template would raise."""
    if not messages or not _TEMPLATE_VARIABLES.isdisjoint(variables):
        return None
    if tools is not None and type(tools) is not list:
        return None
    roles = []
    texts = []
    for m in messages:
        if type(m) is not dict:
            return None
        role = m.get("role")
        text = _text(m)
        if role not in ("system", "user", "assistant", "tool") or text is None:
            return None
        roles.append(role)
        texts.append(text)
    out = []
    if tools:
        out.append(_tool_block(tools, tojson))
        if roles[0] == "system" and texts[0]:
            out.append("\n\n" + texts[0])
        out.append("<|im_end|>\n")
    elif roles[0] == "system":
        out.append(f"<|im_start|>system\n{texts[0]}<|im_end|>\n")
    last_query = next((i for i in range(len(roles) - 1, -1, -1) if roles[i] == "user" and not (
        texts[i].startswith("<tool_response>") and texts[i].endswith("</tool_response>"))), None)
    if last_query is None:
        return None  # "No user query found in messages."
    preserve = variables.get("preserve_thinking") is True
    last = len(roles) - 1
    for i, (m, role, content) in enumerate(zip(messages, roles, texts, strict=True)):
        if role == "system":
            if i:
                return None  # "System message must be at the beginning."
        elif role == "user":
            out.append(f"<|im_start|>user\n{content}<|im_end|>\n")
        elif role == "assistant":
            reasoning = m.get("reasoning_content")
            if isinstance(reasoning, str):  # (``is string``)
                if type(reasoning) is not str:
                    return None
            else:
                reasoning = ""
                if "</think>" in content:
                    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                    content = content.split("</think>")[-1].lstrip("\n")
            reasoning = reasoning.strip()
            if preserve or i > last_query:
                out.append(f"<|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{content}")
            else:
                out.append(f"<|im_start|>assistant\n{content}")
            calls = m.get("tool_calls")
            if calls:
                made = _calls(calls, content, tojson)
                if made is None:
                    return None
                out.append(made)
            out.append("<|im_end|>\n")
        else:  # tool
            if i and roles[i - 1] != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if i == last or roles[i + 1] != "tool":
                out.append("<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        out.append("<think>\n\n</think>\n\n" if variables.get("enable_thinking") is False else "<think>\n")
    return "".join(out)


def gemma3(messages: Sequence[Any], tools: Any, add_generation_prompt: bool, variables: Mapping[str, Any],
           tojson: Tojson) -> str | None:
    """Gemma 3's published template (``templates/gemma3.jinja``), or None where it does not know
    the conversation's shape or the template would raise. The template reads neither tools nor tool
    calls (a profile's conversation is rewritten for it before it renders, ``core/fallback.py``)."""
    if not messages or not _TEMPLATE_VARIABLES.isdisjoint(variables):
        return None
    bos = variables.get("bos_token")
    if type(bos) is not str:
        return None  # (absent, the template writes nothing; anything else, its text)
    first = messages[0]
    if type(first) is not dict:
        return None
    prefix = ""
    turns = messages
    if first.get("role") == "system":
        system = first.get("content")
        if type(system) is not str:
            return None  # content parts (the first part's text), or the template raises
        prefix = system + "\n\n"
        turns = messages[1:]
    out = [bos]
    for i, m in enumerate(turns):
        if type(m) is not dict:
            return None
        role = m.get("role")
        if type(role) is not str or (role == "user") != (i % 2 == 0):
            return None  # "Conversation roles must alternate user/assistant/user/assistant/..."
        if "content" in m:
            content = m["content"]
            if type(content) is not str:
                return None  # content parts, or "Invalid content type"
            content = content.strip()  # (``| trim``)
        else:
            content = ""  # (an undefined value iterates as nothing)
        out.append(f"<start_of_turn>{'model' if role == 'assistant' else role}\n{prefix if i == 0 else ''}"
                   f"{content}<end_of_turn>\n")
    if add_generation_prompt:
        out.append("<start_of_turn>model\n")
    return "".join(out)


_KNOWN: dict[str, Native] = {
    # sha256 of each template's source as published (budgeter/tokenizers/templates/)
    "7bae0b09ae5484e04695a56bdb42c0063cffa3f27e85649a8c9b08d34cbb2aa7": qwen36,  # qwen3.6.jinja
    "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4": gemma3,  # gemma3.jinja
}


def for_template(source: str) -> Native | None:
    """The renderer written from ``source``, where there is one."""
    return _KNOWN.get(cache.text_digest(source))
