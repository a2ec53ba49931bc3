"""The one error tree of budgeter.

Every error has a stable ``reason`` (UPPER_SNAKE, AIP-193) and ``metadata`` (str -> str).
The gRPC layer maps these classes to status codes in one table; the CLI prints
``reason: message`` and exits non-zero.

    BudgeterError
    ├── InvalidInput               INVALID_ARGUMENT   (bad messages, bad JSON, bad spec)
    │   ├── InvalidMessage         reason INVALID_MESSAGE
    │   ├── InvalidTokenizerSpec   reason INVALID_TOKENIZER_SPEC
    │   ├── RequestIdReused        reason REQUEST_ID_REUSED (same request_id, other messages)
    │   └── LimitExceeded          reason MESSAGE_TOO_LARGE, TOO_MANY_MESSAGES (per request)
    ├── NotFound                   NOT_FOUND
    │   ├── UnknownTokenizer       reason UNKNOWN_TOKENIZER (metadata lists what exists)
    │   ├── SessionNotFound        reason SESSION_NOT_FOUND
    │   └── PayloadNotFound        reason PAYLOAD_NOT_FOUND
    ├── AlreadyExists              ALREADY_EXISTS     reason SESSION_EXISTS
    ├── EtagMismatch               ABORTED            (optimistic concurrency, AIP-154)
    ├── QuotaExceeded              RESOURCE_EXHAUSTED reason TOO_MANY_SESSIONS
    ├── StoreUnavailable           UNAVAILABLE        (Redis down, SQLite locked too long)
    ├── PinnedOverBudget           FAILED_PRECONDITION (pinned content alone exceeds the budget)
    ├── TemplateError              FAILED_PRECONDITION (the chat template cannot render the input)
    ├── TokenizerLoadError         FAILED_PRECONDITION (a tokenizer spec exists but cannot be loaded)
    │   └── NoChatTemplate         reason NO_CHAT_TEMPLATE (the tokenizer ships none and none was named)
    └── MissingExtra               FAILED_PRECONDITION reason MISSING_EXTRA (metadata names the extra)
"""

from __future__ import annotations

from collections.abc import Mapping


class BudgeterError(Exception):
    reason = "INTERNAL"

    def __init__(self, message: str, *, metadata: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = {k: str(v) for k, v in (metadata or {}).items()}


class InvalidInput(BudgeterError):
    reason = "INVALID_INPUT"

    def __init__(
        self, message: str, *, field: str = "", reason: str = "",
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message, metadata={**(metadata or {}), **({"field": field} if field else {})})
        self.field = field
        if reason:
            self.reason = reason


class InvalidMessage(InvalidInput):
    reason = "INVALID_MESSAGE"


class InvalidTokenizerSpec(InvalidInput):
    reason = "INVALID_TOKENIZER_SPEC"


class NotFound(BudgeterError):
    reason = "NOT_FOUND"


class UnknownTokenizer(NotFound):
    reason = "UNKNOWN_TOKENIZER"


class PayloadNotFound(NotFound):
    reason = "PAYLOAD_NOT_FOUND"


class PinnedOverBudget(BudgeterError):
    reason = "PINNED_OVER_BUDGET"


class TemplateError(BudgeterError):
    reason = "TEMPLATE_ERROR"


class TokenizerLoadError(BudgeterError):
    reason = "TOKENIZER_LOAD_ERROR"


class NoChatTemplate(TokenizerLoadError):
    """A tokenizer that ships no chat template, with no ``chat_format`` named: counting it with a
    guessed template would be off on every turn."""

    reason = "NO_CHAT_TEMPLATE"


class RequestIdReused(InvalidInput):
    reason = "REQUEST_ID_REUSED"


class LimitExceeded(InvalidInput):
    """A per-request limit; ``reason`` names which one."""


class SessionNotFound(NotFound):
    reason = "SESSION_NOT_FOUND"


class AlreadyExists(BudgeterError):
    reason = "SESSION_EXISTS"


class EtagMismatch(BudgeterError):
    reason = "ETAG_MISMATCH"


class QuotaExceeded(BudgeterError):
    reason = "TOO_MANY_SESSIONS"


class StoreUnavailable(BudgeterError):
    reason = "STORE_UNAVAILABLE"


class MissingExtra(BudgeterError):
    """A part that comes with an extra not installed here (``pip install 'budgeter[EXTRA]'``)."""

    reason = "MISSING_EXTRA"
    MODULES = {"proxy": ("starlette", "uvicorn", "httptools", "aiohttp", "msgspec"), "redis": ("redis", "hiredis"),
               "gguf": ("gguf", "transformers"), "mistral": ("mistral_common",)}

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the {extra} extra: pip install 'budgeter[{extra}]'",
                         metadata={"extra": extra})

    @classmethod
    def explains(cls, exc: ImportError, extra: str) -> bool:
        """Whether ``exc`` is the import of one of the extra's own packages failing."""
        return (exc.name or "").partition(".")[0] in cls.MODULES[extra]
