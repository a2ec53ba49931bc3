"""Lossless recall (opt-in, ``--recall-tool``): the model may ask for elided content by handle.

The proxy adds ``budgeter_recall`` to the tools of every session it creates (so the exact count
includes its schema). When a reply calls only that tool, the proxy answers from the store and asks
the upstream again with the call and its answer appended; neither is stored in the session and the
agent never sees them. A reply that mixes it with other calls is passed on as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from budgeter.core.messages import Message, to_openai
from budgeter.errors import BudgeterError
from budgeter.proxy.stream import Reply

NAME = "budgeter_recall"
MAX_ROUNDS = 3
TOOL = {"type": "function", "function": {
    "name": NAME,
    "description": ("Return the full original text of content that was shortened or elided from "
                    "this conversation. Pass the handle quoted in the shortened text: the 16 hex "
                    "digits after h= in a marker such as ⟦budgeter:elided ... h=3f9a0c1d2b4e5f60⟧."),
    "parameters": {"type": "object", "properties": {"handle": {"type": "string"}},
                   "required": ["handle"]}}}


def recall_only(reply: Reply) -> bool:
    return bool(reply.calls) and all(c.name == NAME for c in reply.calls.values())


def undecided(reply: Reply) -> bool:
    """True while a streamed reply may still turn out to call only the recall tool: no text yet,
    and no call to another tool."""
    return not "".join(reply.content).strip() and all(c.name in ("", NAME) for c in reply.calls.values())


def answers(reply: Message, lookup: Callable[[str], str]) -> list[Message]:
    out = []
    for call in reply.tool_calls:
        try:
            args = json.loads(call.arguments or "{}")
            handle = args.get("handle", "") if isinstance(args, dict) else ""
            text = lookup(str(handle)) if handle else "Error: give the handle, e.g. {\"handle\": \"h...\"}"
        except (ValueError, RecursionError):  # nested past the parser's depth: no handle either
            text = "Error: arguments must be JSON like {\"handle\": \"h...\"}"
        except BudgeterError as exc:
            text = f"Error: {exc.message}"
        out.append(Message("tool", text, tool_call_id=call.id))
    return out


def too_large(results: list[Message], needed: int, budget: int) -> list[Message]:
    note = (f"Error: the recalled text needs {needed} tokens in the prompt; the budget is {budget}. "
            "Work from the shortened text.")
    return [Message("tool", note, tool_call_id=m.tool_call_id) for m in results]


def extend(body: dict[str, Any], call: Message, results: list[Message]) -> dict[str, Any]:
    """The next upstream body: the recall call and its answers after the prompt."""
    calls = tuple(replace(c, arguments=_as_object(c.arguments)) for c in call.tool_calls)
    stripped = Message("assistant", call.content, calls, reasoning=call.reasoning)
    extra = [to_openai(stripped), *(to_openai(m) for m in results)]
    return {**body, "messages": [*body["messages"], *extra]}


def _as_object(arguments: str) -> str:
    """A recall call's arguments as a template renders them (``|items``): a JSON object. Anything
    else (an array, null, a number, text that is no JSON) is sent as ``{}``, beside the answer
    saying it was not readable."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except (ValueError, RecursionError):
        return "{}"
