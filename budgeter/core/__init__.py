"""The pure core: messages, counting interfaces, JSON-argument handling and compaction.

Nothing here imports grpc, redis, protobuf or transformers (a test checks it). The names below are
loaded on first use (PEP 562), so that importing one module of the core (``budgeter validate``
needs ``guards``) does not load the engine and every step with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgeter.core.engine import BuildResult, Engine, trim
    from budgeter.core.markers import contains_marker, find_markers
    from budgeter.core.messages import Message, ToolCall, from_openai, to_openai
    from budgeter.core.policy import FileTools, Policy

_FROM = {
    "BuildResult": "engine", "Engine": "engine", "trim": "engine",
    "contains_marker": "markers", "find_markers": "markers",
    "Message": "messages", "ToolCall": "messages", "from_openai": "messages", "to_openai": "messages",
    "FileTools": "policy", "Policy": "policy",
}

__all__ = [
    "BuildResult",
    "FileTools",
    "Message",
    "Policy",
    "Engine",
    "ToolCall",
    "contains_marker",
    "find_markers",
    "from_openai",
    "to_openai",
    "trim",
]


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
