"""Sessions over a store: what every RPC does, with no protobuf in sight.

The engine state of recently used sessions lives in the ``Replica`` cache (``replica.py``); the
plain values are in ``model.py`` (re-exported here).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from budgeter.core.chains import LINK, Link, assemble
from budgeter.core.counting import Adaptation, adaptations, sent
from budgeter.core.engine import BuildResult, trim
from budgeter.core.jsonargs import dumps_compact, dumps_text, escape_surrogates, loads
from budgeter.core.memo import CharMemo, leading_same
from budgeter.core.messages import Message, check_tools, stored_json, to_openai
from budgeter.core.policy import policy_from_dict, policy_to_dict
from budgeter.core.typing import JSONDict
from budgeter.errors import (
    EtagMismatch,
    InvalidInput,
    LimitExceeded,
    PayloadNotFound,
    QuotaExceeded,
    RequestIdReused,
    SessionNotFound,
)
from budgeter.sessions.model import (
    TENANT,
    Appended,
    AppendResult,
    Built,
    CallInfo,
    CountResult,
    Limits,
    SessionConfig,
    SessionInfo,
    StoredMessage,
    etag_digest,
    external_id,
    make_etag,
    parse_etag,
    scoped,
    session_id_of,
)
from budgeter.sessions.replica import Live, Replica
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.store.base import AppendOutcome, SessionRecord, SessionStore, StaleIncarnation, check_session_id

if TYPE_CHECKING:
    from budgeter.settings import Settings

__all__ = ["TENANT", "AppendResult", "CountResult", "Limits", "Line", "SessionConfig", "SessionInfo", "Sessions",
           "external_id", "session_id_of"]

@dataclass(frozen=True, slots=True)
class Line:
    """A session's stored conversation at one moment (``Sessions.line``)."""

    id: str
    history: tuple[Message, ...]
    tools: tuple[JSONDict, ...]
    incarnation: str
    version: int
    """How many messages it holds: with ``incarnation``, what an append's etag names."""


MAX_TTL = 3650 * 86_400
"""The longest session TTL, ten years: an expiry past year 9999 has no timestamp to read it back
into (every read of the session, and every listing page holding it, failed)."""


def _serialized(messages: Sequence[Message]) -> tuple[list[str], list[bytes]]:
    """Each message as stored JSON, and encoded: once, for the size limits and the fingerprint."""
    texts = [stored_json(m) for m in messages]
    return texts, [t.encode() for t in texts]


class Sessions:
    def __init__(self, store: SessionStore, tokenizers: Tokenizers, *, limits: Limits | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.tokenizers = tokenizers
        self.limits = limits or Limits()
        self._clock = clock
        self.replica = Replica(store, tokenizers, limit=self.limits.live_sessions,
                               limit_bytes=self.limits.live_bytes)
        self._wire: CharMemo[Message, JSONDict] = CharMemo()
        """Each prompt message as ``sent`` gives it: a prompt is mostly the previous one's messages,
        converted once (the proxy's turn converted them all every time: ``bench_proxy --growth``)."""

    # -- sessions ------------------------------------------------------------------------------

    def create(self, *, session_id: str = "", tokenizer: str = "", policy: dict[str, Any] | None = None,
               tools: Sequence[JSONDict] = (), ttl: float | None = None) -> SessionInfo:
        sid = scoped(check_session_id(session_id) if session_id else uuid.uuid4().hex)
        name = self.tokenizers.name(tokenizer)
        config = SessionConfig(name, self.tokenizers.spec(name), policy_from_dict(policy or {}),
                               tuple(check_tools(tools)))
        if ttl is not None and not 0 < ttl <= MAX_TTL:
            raise InvalidInput(f"ttl must be positive and at most {MAX_TTL // 86_400:,} days", field="ttl",
                               metadata={"max_seconds": MAX_TTL})
        self.tokenizers.counter(name)  # fail now if the profile cannot load
        if self.store.count() >= self.limits.max_sessions:
            raise QuotaExceeded(f"this server holds its maximum of {self.limits.max_sessions} sessions",
                                metadata={"max_sessions": self.limits.max_sessions})
        now = self._clock()
        record = SessionRecord(sid, uuid.uuid4().hex, config.to_json(), now, ttl,
                               now + ttl if ttl else None)
        self.store.create(record)
        return SessionInfo(sid, config, record)

    def get(self, name: str) -> SessionInfo:
        sid = session_id_of(name)
        return SessionInfo.of(self.store.get(sid))

    def list_sessions(self, *, page_size: int = 0, page_token: str = "") -> tuple[list[SessionInfo], str]:
        size = 100 if page_size <= 0 else min(page_size, 1000)
        prefix = scoped("")
        after = decode_token(page_token)
        records = self.store.list_page(after=scoped(after) if after else prefix, limit=size + 1)
        if prefix:  # a tenant's ids are contiguous in id order
            records = list(itertools.takewhile(lambda r: r.id.startswith(prefix), records))
        infos = [SessionInfo.of(r) for r in records[:size]]
        more = len(records) > size
        return infos, encode_token(external_id(infos[-1].id)) if more and infos else ""

    def delete(self, name: str) -> None:
        sid = session_id_of(name)
        self.store.delete(sid)
        self.replica.forget(sid)

    # -- history -------------------------------------------------------------------------------

    def append(self, name: str, messages: Sequence[Message], *, request_id: str = "",
               etag: str = "") -> AppendResult:
        sid = session_id_of(name)
        texts, encoded = _serialized(messages)
        self.check_sizes([len(b) for b in encoded])
        fp = fingerprint(encoded)
        live = self.replica.cached(sid)
        if live is not None and _at(live, etag):  # current unless another writer came between: the
            try:                                   # store checks that; only then is the session read
                return self._append(live, messages, texts, fp, request_id, etag, unread=True)
            except EtagMismatch:
                if etag:  # the store is past the caller's etag: the caller's conflict, not ours
                    raise
            except StaleIncarnation:
                pass
            except SessionNotFound:
                self.replica.forget(sid)
                raise
        for _ in range(2):
            live = self.replica.sync(sid)  # the verdicts need the session's tools and earlier failures
            try:
                return self._append(live, messages, texts, fp, request_id, etag)
            except StaleIncarnation:
                self.replica.forget(sid)
        raise EtagMismatch("the session was replaced while appending; retry",
                           metadata={"session": sid})

    def _append(self, live: Live, messages: Sequence[Message], texts: Sequence[str], fp: str,
                request_id: str, etag: str, *, unread: bool = False) -> AppendResult:
        """``texts``: each message as stored JSON, the record wraps it with its counts; ``fp``:
        their ``fingerprint``. ``unread``: ``live`` was not caught up with the store first, so the
        store must find it at the same version (EtagMismatch otherwise: without an etag, the
        caller reads the session and appends again)."""
        info = live.info
        cfg = info.config
        counter = self.tokenizers.counter(cfg.tokenizer)
        records: list[str] = []
        made: list[tuple[int, tuple[CallInfo, ...], str | None]] = []
        with live.lock:
            facts = live.engine.log.preview(messages)
            previewed_at = len(live.engine.log)
            seen, seen_digest = live.version, live.digest
        with self.tokenizers.lock(cfg.tokenizer):
            for m, text, f in zip(messages, texts, facts, strict=True):
                cost, pieces = counter.export_cost(m)
                records.append(StoredMessage(text, cfg.spec, cost, pieces).encode())
                made.append((cost, tuple(CallInfo.of(c) for c in f.calls),
                             f.result.value if f.result is not None else None))
        results = [[cost, [c.to_list() for c in calls], status] for cost, calls, status in made]  # as stored
        expected = parse_etag(etag, info.record.incarnation) if etag else (seen if unread else None)
        expected_digest = etag_digest(etag) if etag else (seen_digest if unread else "")
        def store_append(fp: str) -> AppendOutcome:
            return self.store.append(
                info.id, records, incarnation=info.record.incarnation, request_id=request_id,
                fingerprint=fp, result=dumps_compact(results), expected_version=expected,
                expected_digest=expected_digest)

        try:
            outcome = store_append(fp)
        except RequestIdReused:  # maybe first sent to a replica that stored JSON with spaces
            outcome = store_append(fingerprint([dumps_text(loads(t)).encode() for t in texts]))
        current = not outcome.replayed and self.replica.written(
            live, outcome.first_index, outcome.version, messages,
            facts if previewed_at == outcome.first_index else None, events=outcome.events,
            digests=(outcome.digest_before, outcome.digest))
        if outcome.replayed:  # what the first append answered, as stored
            made = [(cost, tuple(CallInfo.from_list(c) for c in calls), result)
                    for cost, calls, result in json.loads(outcome.result)]
        appended = tuple(Appended(outcome.first_index + i, *m) for i, m in enumerate(made))
        return AppendResult(appended, make_etag(outcome.version, info.record.incarnation, outcome.digest),
                            outcome.version, outcome.replayed, cfg.tokenizer, current)

    def check_messages(self, messages: Sequence[Message]) -> None:
        """``append``'s limits on ``messages``, without appending them: for an append that runs
        after its caller has answered (the proxy's reply), whose refusal must come before."""
        self.check_sizes([len(b) for b in _serialized(messages)[1]])

    def check_sizes(self, sizes: Sequence[int]) -> None:
        """The append limits, on sizes alone: callers check them before parsing anything."""
        lim = self.limits
        if not sizes:
            raise InvalidInput("messages must not be empty", field="messages")
        if len(sizes) > lim.max_messages_per_append:
            raise LimitExceeded(f"{len(sizes)} messages in one append; the limit is "
                                f"{lim.max_messages_per_append}", reason="TOO_MANY_MESSAGES",
                                field="messages", metadata={"limit": lim.max_messages_per_append})
        for i, size in enumerate(sizes):
            if size > lim.max_message_bytes:
                raise LimitExceeded(f"messages[{i}] is {size} bytes; the limit is {lim.max_message_bytes}",
                                    reason="MESSAGE_TOO_LARGE", field=f"messages[{i}]",
                                    metadata={"limit": lim.max_message_bytes, "size": size})

    # -- prompts -------------------------------------------------------------------------------

    def build(self, name: str, *, overrides: dict[str, Any] | None = None, after: AppendResult | None = None,
              known: str = "", body_delta: bool = False) -> Built:
        """``after``: the append this build follows in the same request (a one-call turn); when it
        was written through, the replica is current and the store is not read again. ``known``:
        the prompt id the caller holds; when it is this engine's previous prompt, ``kept`` says
        how many of its leading messages the new prompt shares, or, for a prompt rewritten for the
        template, ``kept_body`` how many of the rewritten ones (where the caller takes that:
        ``body_delta``)."""
        sid = session_id_of(name)
        live = (self.replica.cached(sid) if after is not None and after.current else None) or self.replica.sync(sid)
        with live.lock, self.tokenizers.lock(live.info.config.tokenizer):
            result = self._one_off(live, overrides) if overrides else live.engine.build()
            wire = sent(live.engine.counter, result.messages, live.engine.tools, memo=live.sent_memo)
            before = live.sent_last
            if not overrides:
                live.sent_last = (result.serial, *wire) if wire is not None else None
            live.unstored.update((h, escape_surrogates(t)) for h, t in result.payloads.items()
                                 if h not in live.stored_handles)
            live.unstored.update((LINK + h, link.encode()) for h, link in result.links.items()
                                 if LINK + h not in live.stored_handles)
            new = dict(live.unstored)  # with any a failed write left (a later link may extend one)
            info = replace(live.info, record=replace(live.info.record, version=live.version, digest=live.digest))
        if new:
            self.store.put_payloads(sid, new)
            with live.lock:
                live.stored_handles.update(new)
                for h in new:
                    live.unstored.pop(h, None)
        if overrides:
            return Built(result, info, sent=wire)
        prompt_id = live.prompt_id(result.serial)
        if not known or known != live.prompt_id(result.serial - 1):
            return Built(result, info, prompt_id, 0, wire)
        if wire is None:
            return Built(result, info, prompt_id, result.prefix_changed_at, None)
        # a rewritten conversation's messages do not map one to one onto the prompt's: the part sent
        # again is found among the rewritten ones (the same objects where the rewrite is the same)
        kept = 0
        if body_delta and before is not None and before[0] == result.serial - 1 and before[2] == wire[1]:
            kept = leading_same(before[1], wire[0])
        return Built(result, info, prompt_id, 0, wire, kept)

    def _one_off(self, live: Live, overrides: dict[str, Any]) -> BuildResult:
        """A build with per-call policy changes; the session's own plan is left as it was."""
        base = policy_to_dict(live.engine.policy)
        policy = policy_from_dict({**base, **overrides})
        return live.engine.fork(policy).build()

    def sent(self, tokenizer: str, messages: Sequence[Message], tools: Sequence[JSONDict]
             ) -> tuple[list[JSONDict], list[JSONDict], tuple[Adaptation, ...]]:
        """The request to send for a prompt counted under ``tokenizer``: what it counted, and the
        profile's rewrites for its template where it was rewritten (else ()). Messages sent as they
        are come as the same dicts on every call: they are not to be changed."""
        name = self.tokenizers.name(tokenizer)
        counter = self.tokenizers.counter(name)
        with self.tokenizers.lock(name):  # (the memo's too)
            got = sent(counter, messages, tools)
            if got is None:
                return self._openai(messages), list(tools), ()
        return got[0], got[1], adaptations(counter)

    def _openai(self, messages: Sequence[Message]) -> list[JSONDict]:
        wire = self._wire
        out = list(map(wire.get, messages))  # (looked up in C: a call per message cost half as much again)
        if None in out:
            out = [d if d is not None else wire.put(m, to_openai(m), m.size)
                   for m, d in zip(messages, out, strict=True)]
        return out  # type: ignore[return-value]

    def fit(self, tokenizer: str, messages: Sequence[Message], tools: Sequence[JSONDict], policy: dict[str, Any]
            ) -> BuildResult:
        """A stateless build: ``messages`` compacted to fit under ``policy``, nothing stored."""
        name = self.tokenizers.name(tokenizer)
        counter = self.tokenizers.counter(name)
        with self.tokenizers.lock(name):
            return trim(messages, counter=counter, tools=tools, policy=policy_from_dict(policy))

    def adaptations(self, tokenizer: str) -> tuple[Adaptation, ...]:
        """The rewrites ``tokenizer``'s profile makes for its template (found when it loaded)."""
        return adaptations(self.tokenizers.counter(self.tokenizers.name(tokenizer)))

    def count(self, *, tokenizer: str = "", messages: Sequence[Message] = (), text: str = "",
              tools: Sequence[JSONDict] = ()) -> CountResult:
        if messages and text:
            raise InvalidInput("give messages or text, not both", field="text")
        name = self.tokenizers.name(tokenizer)
        counter = self.tokenizers.counter(name)
        with self.tokenizers.lock(name):
            if not messages:
                return CountResult(counter.count_text(text), (), name, counter.notes)
            total = counter.count_prompt(messages, check_tools(tools))
            each = tuple(counter.message_cost(m) for m in messages)
        return CountResult(total, each, name, counter.notes)

    def profile(self, name: str, *, tokenizers: Sequence[str] = (), window: int = 0, top: int = 10
                ) -> list[dict[str, Any]]:
        from budgeter.core.profile import profile

        live = self.replica.sync(session_id_of(name))
        cfg = live.info.config
        if window < 0 or top < 0:
            raise InvalidInput("window and top must not be negative", field="window")
        policy = replace(cfg.policy, window=window) if window else cfg.policy
        if policy.validate():
            raise InvalidInput("window must exceed the session's reserve", field="window")
        with live.lock:
            history = list(live.engine.history)
        out = []
        for spec_name in list(tokenizers) or [cfg.tokenizer]:
            name_ = self.tokenizers.name(spec_name)
            started = time.perf_counter()
            counter = self.tokenizers.counter(name_)
            loaded = time.perf_counter() - started
            with self.tokenizers.lock(name_):
                result = profile(history, counter=counter, tools=cfg.tools, policy=policy,
                                 load_seconds=loaded)
            out.append({**result.as_dict(top=top or 10), "tokenizer": name_})
        return out

    def payload(self, name: str, handle: str) -> str:
        """An elided payload, or the messages a digest replaced, put back together from its
        links."""
        if not handle:
            raise InvalidInput("handle is required", field="handle")
        sid = session_id_of(name)
        if handle.startswith(LINK):  # a stored link is not a payload
            raise PayloadNotFound(f"no payload {handle!r} in session {sid!r}",
                                  metadata={"session": sid, "handle": handle})
        try:
            return self.store.get_payload(sid, handle)
        except PayloadNotFound as exc:
            missing = exc  # unless a link holds it

        def link(h: str) -> Link:
            try:
                return Link.decode(self.store.get_payload(sid, LINK + h))
            except PayloadNotFound:
                if h == handle:
                    raise missing from None
                raise PayloadNotFound(f"payload {h!r}, which a later digest extends, is missing from "
                                      f"session {sid!r}", metadata={"session": sid, "handle": h}) from None

        return assemble(handle, link)

    def line(self, name: str) -> Line:
        """A frozen snapshot of the session's messages, tools and etag, caught up with the store."""
        live = self.replica.sync(session_id_of(name))
        with live.lock:
            return Line(live.info.id, tuple(live.engine.history), tuple(live.info.config.tools),
                        live.info.record.incarnation, len(live.engine.history))

    def live(self, name: str) -> Live:
        """The session's engine state, caught up with the store (for the guard rails)."""
        return self.replica.sync(session_id_of(name))


def from_settings(settings: Settings, store: SessionStore) -> Sessions:
    """The session layer of ``budgeter serve`` and ``budgeter proxy`` over ``store``, with the default
    and preloaded profiles loaded now, so that the first request is not the slow one."""
    tokenizers = Tokenizers(settings.tokenizers, default=settings.default_tokenizer,
                            formats=settings.chat_formats)
    for name in {settings.default_tokenizer, *settings.preload}:
        tokenizers.counter(name)
    limits = Limits(settings.max_message_bytes, settings.max_messages_per_append,
                    settings.max_sessions, settings.live_sessions, settings.live_bytes)
    return Sessions(store, tokenizers, limits=limits)


def _at(live: Live, etag: str) -> bool:
    """Whether an append may skip reading the session first: no etag, or one naming the cached
    state's incarnation and version (the store checks the version either way)."""
    if not etag:
        return True
    try:
        return (parse_etag(etag, live.info.record.incarnation) == live.version
                and live.digest.startswith(etag_digest(etag)))
    except (InvalidInput, EtagMismatch):  # malformed, or another incarnation: the reading path says so
        return False


def fingerprint(texts: Sequence[bytes]) -> str:
    """Identifies an append's content (its messages as stored JSON, whose key order is fixed),
    so a reused request_id with other messages is caught."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text)
        digest.update(b"\n")  # JSON text never holds a raw newline
    return digest.hexdigest()[:32]


def encode_token(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    if not token:
        return ""
    try:
        after = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        return check_session_id(after)
    except (ValueError, InvalidInput) as exc:
        raise InvalidInput("invalid page_token", field="page_token",
                           reason="INVALID_PAGE_TOKEN") from exc
