"""The service's plain values: session config and info, append and count results, limits, etags
and tenant-scoped session ids. No protobuf here; ``convert.py`` maps these to messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from budgeter.core.engine import BuildResult
from budgeter.core.facts import CallFacts
from budgeter.core.jsonargs import dumps_compact, dumps_text
from budgeter.core.memo import CharMemo
from budgeter.core.policy import Policy, policy_from_dict, policy_to_dict
from budgeter.core.typing import JSONDict
from budgeter.errors import EtagMismatch, InvalidInput
from budgeter.store.base import SessionRecord, check_session_id


@dataclass(frozen=True, slots=True)
class Limits:
    max_message_bytes: int = 4 << 20
    max_messages_per_append: int = 1000
    max_sessions: int = 100_000
    live_sessions: int = 512
    live_bytes: int = 1 << 30


@dataclass(frozen=True, slots=True)
class SessionConfig:
    tokenizer: str
    spec: str
    policy: Policy
    tools: tuple[JSONDict, ...] = ()

    def to_json(self) -> str:
        return dumps_text({"tokenizer": self.tokenizer, "spec": self.spec,
                           "policy": policy_to_dict(self.policy), "tools": list(self.tools)})

    @classmethod
    def from_json(cls, text: str) -> SessionConfig:
        """Parsed once per text: ``GetSession`` and ``ListSessions`` read every session's stored
        config, whose tools are most of it (a third of ``bench_flat``'s ``GetSession`` floor with
        52 schemas). The config is immutable and its tools are read, never changed, so one object
        serves all."""
        hit = _configs.get(text)
        if hit is None:
            raw = json.loads(text)
            hit = _configs.put(text, cls(raw["tokenizer"], raw["spec"], policy_from_dict(raw["policy"]),
                                         tuple(raw["tools"])), len(text))
        return hit


_configs: CharMemo[str, SessionConfig] = CharMemo()


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    config: SessionConfig
    record: SessionRecord

    @classmethod
    def of(cls, record: SessionRecord) -> SessionInfo:
        return cls(record.id, SessionConfig.from_json(record.config), record)

    @property
    def etag(self) -> str:
        return make_etag(self.record.version, self.record.incarnation, self.record.digest)


@dataclass(frozen=True, slots=True)
class Built:
    """A build as the front doors return it: the prompt, the session it came from, its id, and how
    many leading messages it shares with the prompt the caller said it holds (0: send it whole)."""

    result: BuildResult
    info: SessionInfo
    prompt_id: str = ""
    kept: int = 0
    sent: tuple[list[JSONDict], list[JSONDict]] | None = None
    """The messages and tools as counted where the profile rewrites them for its template
    (``core.counting.sent``); None: ``result.messages`` and the session's tools as they are."""
    kept_body: int = 0
    """Where ``sent`` is given: how many of its leading messages the rewritten prompt the caller
    holds shares with it (0: send it whole)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """The record codec of one history message in a store: the message as OpenAI JSON (with
    budgeter's extensions), and its token count and piece counts under the tokenizer spec that
    made them, so another replica imports them instead of tokenizing."""

    message_json: str
    spec: str
    tokens: int
    pieces: Sequence[int] = ()

    def encode(self) -> str:
        return (f'{{"m": {self.message_json}, "t": {dumps_compact(self.spec)}, "n": {self.tokens}, '
                f'"p": {dumps_compact(list(self.pieces))}}}')

    @staticmethod
    def decode(text: str) -> tuple[Any, str, int, list[int]]:
        """(the message dict, spec, tokens, piece counts)."""
        raw = json.loads(text)
        return raw["m"], raw.get("t", ""), int(raw.get("n", 0)), raw.get("p") or []


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One tool call's verdict as an append returns it: ``validate_tool_call``'s, with the file
    operation; stored with the append's result so that a replayed append returns it again."""

    id: str
    name: str
    status: str
    detail: str
    runnable: bool
    operation: str
    path: str
    problems: tuple[tuple[str, str, str], ...] = ()
    """(code, field, message) per problem."""
    repeat_of: int | None = None
    repeat_error: str = ""

    @classmethod
    def of(cls, cf: CallFacts) -> CallInfo:
        v = cf.verdict
        return cls(cf.id, cf.name, v.status.value, v.detail or v.repair, v.runnable, cf.op.value, cf.path,
                   tuple((p.code, p.field, p.message) for p in v.problems), v.repeat_of, v.repeat_error)

    def to_list(self) -> list[Any]:
        return [self.id, self.name, self.status, self.detail, self.runnable, self.operation, self.path,
                [list(p) for p in self.problems], self.repeat_of, self.repeat_error]

    @classmethod
    def from_list(cls, raw: list[Any]) -> CallInfo:
        if len(raw) == 6:  # stored before verdicts carried problems: (id, name, status, detail, op, path)
            cid, name, status, detail, op, path = raw
            return cls(cid, name, status, detail, status in ("VALID", "REPAIRED"), op, path)
        cid, name, status, detail, runnable, op, path, problems, repeat_of, repeat_error = raw
        return cls(cid, name, status, detail, bool(runnable), op, path,
                   tuple(tuple(p) for p in problems), repeat_of, repeat_error)  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class Appended:
    index: int
    tokens: int
    calls: tuple[CallInfo, ...]
    result: str | None


@dataclass(frozen=True, slots=True)
class AppendResult:
    messages: tuple[Appended, ...]
    etag: str
    message_count: int
    replayed: bool
    tokenizer: str
    current: bool = False
    """This replica's live engine holds the append (written through, no other writer between):
    a build right after it needs no catch-up read."""
    notes: tuple[str, ...] = ()
    """What the front door changed in the messages on the way in (lone surrogates made U+FFFD)."""


@dataclass(frozen=True, slots=True)
class CountResult:
    tokens: int
    message_tokens: tuple[int, ...]
    tokenizer: str
    notes: tuple[str, ...]


def make_etag(version: int, incarnation: str, digest: str = "") -> str:
    """``VERSION.INCARNATION`` and, where the store keeps one, ``.DIGEST``: two histories of one
    length that differ (a write lost in a failover, then another at its index) get two etags."""
    return f"{version}.{incarnation[:12]}" + (f".{digest[:12]}" if digest else "")


def etag_digest(etag: str) -> str:
    """The digest part of an etag ("" for an etag without one)."""
    return etag.split(".", 2)[2] if etag.count(".") >= 2 else ""


def parse_etag(etag: str, incarnation: str) -> int:
    version, _, rest = etag.partition(".")
    inc = rest.split(".", 1)[0]
    if not version.isdigit() or not inc:
        raise InvalidInput(f"malformed etag {etag!r}", field="etag")
    if not incarnation.startswith(inc):
        raise EtagMismatch("the etag belongs to an earlier session with this id",
                           metadata={"etag": etag})
    return int(version)


TENANT: ContextVar[str] = ContextVar("budgeter_tenant", default="")
"""The caller's tenant, set per RPC by the servicer when authentication is on; sessions are stored
as ``<tenant>:<id>`` (``:`` never occurs in an id), so tenants never see each other's sessions."""


def scoped(session_id: str) -> str:
    tenant = TENANT.get()
    return f"{tenant}:{session_id}" if tenant else session_id


def external_id(stored_id: str) -> str:
    return stored_id.split(":", 1)[1] if ":" in stored_id else stored_id


def session_id_of(name: str) -> str:
    """``sessions/{id}`` or a bare id -> the stored id (scoped to the caller's tenant)."""
    return scoped(check_session_id(name.removeprefix("sessions/")))
