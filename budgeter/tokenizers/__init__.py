"""Tokenizer profiles: real tokenizers and chat templates resolved by name or path.

The names below are loaded on first use (PEP 562): the CLI reads ``budgeter.tokenizers.cache`` for
every command, and only the commands that count need the registry and its backends.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgeter.tokenizers.registry import DEFAULT, available, resolve

__all__ = ["DEFAULT", "available", "resolve"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.registry"), name)
    globals()[name] = value
    return value
