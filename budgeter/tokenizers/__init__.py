"""Tokenizer profiles: real tokenizers and chat templates resolved by name or path."""

from budgeter.tokenizers.registry import DEFAULT, available, resolve

__all__ = ["DEFAULT", "available", "resolve"]
