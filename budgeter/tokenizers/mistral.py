"""Mistral tokenizers from ``mistral-common``, counted with its own exact request encoding.

mistral-common encodes a request message by message and concatenates the token lists
(``InstructTokenizerBase.encode_instruct``). ``MistralCounter`` runs the same walk with the same
flags, but memoizes each message's token count, so history is never re-tokenized. A test proves
the total equals ``len(encode_chat_completion(request).tokens)``.
Tool-call ids are mapped to the 9-character alphanumeric ids Mistral requires (deterministic).
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence
from importlib import resources
from typing import Any

from budgeter.core.messages import Message, to_template
from budgeter.core.typing import JSONDict
from budgeter.errors import TemplateError

_ALPHABET = string.ascii_letters + string.digits


def mistral_id(call_id: str) -> str:
    if len(call_id) == 9 and call_id.isalnum() and call_id.isascii():
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    return "".join(_ALPHABET[(n >> (6 * i)) % 62] for i in range(9))


def _request_dict(m: Message) -> dict[str, Any]:
    d = to_template(m)
    for call in d.get("tool_calls", ()):
        call["id"] = mistral_id(call["id"])
    if m.role == "tool":
        d["tool_call_id"] = mistral_id(m.tool_call_id or "")
    d.pop("reasoning_content", None)
    return d


def _memo_tools(validator: Any, checked: set[tuple[str, ...]]) -> Any:
    """Tool schemas are checked against JSON Schema's meta-schema once per set of tools, not on
    every build (it was a third of a Mistral build)."""
    check = validator._validate_tools

    def validate_tools(tools: list[Any]) -> None:
        key = tuple(t.model_dump_json() for t in tools)
        if key not in checked:
            check(tools)
            checked.add(key)

    validator._validate_tools = validate_tools
    return validator


class MistralCounter:
    def __init__(self, tokenizer: Any, *, name: str) -> None:
        self.name = name
        self.notes: tuple[str, ...] = ("mistral-common request encoding (exact, memoized per message)",)
        self._tok = tokenizer
        self._memo: dict[tuple[Any, ...], int] = {}
        self._costs: dict[Message, int] = {}
        self._finetuning: Any = None
        self._checked: set[tuple[str, ...]] = set()
        _memo_tools(tokenizer._chat_completion_request_validator, self._checked)

    @classmethod
    def builtin(cls, filename: str, *, name: str) -> MistralCounter:
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        path = resources.files("mistral_common") / "data" / filename
        return cls(MistralTokenizer.from_file(str(path)), name=name)

    def _instruct(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> Any:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        try:
            req = ChatCompletionRequest.from_openai([_request_dict(m) for m in messages], list(tools) or None)
            valid = self._validator(messages).validate_request(req)
            return self._tok._instruct_request_normalizer.from_chat_completion_request(valid)
        except Exception as exc:
            raise TemplateError(f"mistral-common rejects this conversation: {exc}") from exc

    def _validator(self, messages: Sequence[Message]) -> Any:
        """A conversation that ends with an assistant message (a transcript being profiled, or a
        final answer) is not a serving request; it is counted as mistral-common tokenizes it for
        fine-tuning: the same messages, the last one closed with EOS."""
        default = self._tok._chat_completion_request_validator
        if not messages or messages[-1].role != "assistant":
            return default
        if self._finetuning is None:
            from mistral_common.protocol.instruct.validator import ValidationMode

            self._finetuning = _memo_tools(type(default)(mode=ValidationMode.finetuning), self._checked)
        return self._finetuning

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> int:
        from mistral_common.protocol.instruct.messages import (
            AssistantMessage,
            ToolMessage,
            UserMessage,
        )

        request = self._instruct(messages, tools)
        it = self._tok.instruct_tokenizer
        first, last = it.find_first_last_user(request)
        total = len(it.start())
        for idx, msg in enumerate(request.messages):
            if isinstance(msg, UserMessage):
                is_last = idx == last
                flags: tuple[Any, ...] = (is_last, idx == first, request.system_prompt,
                                          tuple(t.model_dump_json() for t in request.available_tools or ())
                                          if is_last else ())
                fn = lambda m=msg, f=flags, r=request: it.encode_user_message(  # noqa: E731
                    m, r.available_tools, f[0], f[1], system_prompt=r.system_prompt,
                    force_img_first=True, settings=r.settings)[0]
            elif isinstance(msg, ToolMessage):
                flags = (idx < last,)
                fn = lambda m=msg, f=flags: it.encode_tool_message(m, f[0])[0]  # type: ignore[misc,assignment]  # noqa: E731
            elif isinstance(msg, AssistantMessage):
                flags = (idx < last,)
                fn = lambda m=msg, f=flags: it.encode_assistant_message(  # type: ignore[misc,assignment]  # noqa: E731
                    message=m, is_before_last_user_message=f[0])
            else:
                flags = ()
                fn = lambda m=msg: it.encode_system_message(m)[0]  # type: ignore[misc,assignment]  # noqa: E731
            key = (type(msg).__name__, msg.model_dump_json(), flags)
            n = self._memo.get(key)
            if n is None:
                n = self._memo[key] = len(fn() or ())
            total += n
        return total

    def full_tokens(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> list[int]:
        """mistral-common's own encoding of the whole request (for proofs and tests)."""
        return list(self._tok.instruct_tokenizer.encode_instruct(self._instruct(messages, tools)).tokens)

    def render(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> str:
        """The encoded request as text, control tokens kept (what ``budgeter render`` prints)."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        tokens = self.full_tokens(messages, tools)
        return str(self._tok.instruct_tokenizer.tokenizer.decode(tokens, special_token_policy=SpecialTokenPolicy.KEEP))

    def count_text(self, text: str) -> int:
        return len(self._tok.instruct_tokenizer.tokenizer.encode(text, bos=False, eos=False))

    def export_cost(self, message: Message) -> tuple[int, list[int]]:
        return self.message_cost(message), []

    def import_cost(self, message: Message, cost: int, counts: Sequence[int]) -> None:
        self._costs.setdefault(message, int(cost))

    def message_cost(self, message: Message) -> int:
        cost = self._costs.get(message)
        if cost is None:
            text = message.content + "".join(c.name + c.arguments for c in message.tool_calls)
            tekken = self._tok.instruct_tokenizer.tokenizer
            cost = self._costs[message] = len(tekken.encode(text, bos=False, eos=False)) + 4
        return cost
