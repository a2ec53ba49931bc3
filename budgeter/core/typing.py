"""Plug points of the core, typed in one place.

- ``Tokenizer``: counts ordinary text (no special-token matching) and names the strings that it
  matches as single special/added tokens.
- ``ChatFormat``: renders OpenAI-style message dicts (arguments already parsed into objects) to the
  prompt text an inference server would tokenize.
- ``PromptCounter``: exact token count of a whole prompt, plus a cached per-message cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from budgeter.core.messages import Message

JSONDict = dict[str, Any]


class Tokenizer(Protocol):
    name: str

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Token counts of ordinary texts (special-token strings inside are NOT matched)."""
        ...

    def special_pattern(self) -> str:
        """Regex alternation that matches every added/special token (with any lstrip/rstrip
        whitespace it absorbs) as one token; empty when there are none."""
        ...

    def encode_full(self, text: str) -> list[int]:
        """Token ids of a whole rendered prompt, special tokens matched (for proofs and tests)."""
        ...


class ChatFormat(Protocol):
    name: str

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool = True,
    ) -> str: ...


class PromptCounter(Protocol):
    name: str

    @property
    def notes(self) -> tuple[str, ...]:
        """What the report should say about this profile: fallbacks, count mode."""
        ...

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> int:
        """Exact token count of the prompt the server would build for these messages."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of plain text (special-token strings matched as the server would)."""
        ...

    def message_cost(self, message: Message) -> int:
        """Cached cost of one message rendered on its own (used to plan; totals are exact)."""
        ...

    def export_cost(self, message: Message) -> tuple[int, list[int]]:
        """``message_cost`` plus whatever lets another process skip tokenizing this message."""
        ...

    def import_cost(self, message: Message, cost: int, counts: Sequence[int]) -> None:
        """Learn what ``export_cost`` gave (same profile) without tokenizing."""
        ...

