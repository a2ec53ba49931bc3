"""A replica's cache of session engine state, kept in step with the store.

Each replica keeps, per recently used session, the engine's state (``Live``): the history with its
cached counts and the plan of the previous prompt, and the store version it has seen. A request
first reads only the records past that version (one round trip), so a replica never re-reads or
re-tokenizes history: each stored record carries its message's token count and piece counts
under the tokenizer spec that made them, and a replica imports them instead of tokenizing.

The cache is bounded twice: by sessions (``limit``) and by the bytes their engine state is
estimated to hold (``limit_bytes``); least recently used sessions go first, and one evicted is
loaded from the store again at its next use. The session used last is never evicted, so a
session larger than the whole bound still works: it is evicted once another one is used.

The process-wide memos that hold message text (``core/memo.py``) keep an evicted session's messages
until they turn over, so their budget follows the same bound (``memo_chars``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from budgeter.core import memo as memos
from budgeter.core.counting import SentMemo
from budgeter.core.engine import Engine
from budgeter.core.facts import Facts
from budgeter.core.messages import Message, from_openai
from budgeter.core.typing import JSONDict
from budgeter.errors import EtagMismatch, SessionNotFound
from budgeter.sessions.model import SessionInfo, StoredMessage
from budgeter.sessions.tokenizers import Tokenizers
from budgeter.store.base import SessionRecord, SessionStore, chain

BYTES_PER_CHAR = 8
BYTES_PER_MESSAGE = 600
"""A session's engine state, estimated from its history's text characters and messages, fitted
to what ``tests/bench/bench_memory.py --calibrate`` measures and rounded up."""


MEMO_SHARE = 32
MIN_MEMO_CHARS = 1 << 20


def memo_chars(live_bytes: int) -> int:
    """Each process-wide memo's budget in characters for a replica bounded at ``live_bytes``: a
    32nd of it, and at least 1M. The memos mostly hold the messages the cached sessions hold too,
    so they keep far less alive than their summed budgets (``bench_memory``)."""
    return max(MIN_MEMO_CHARS, live_bytes // MEMO_SHARE)


def footprint(messages: Sequence[Message]) -> int:
    """The estimated bytes ``messages`` add to a session's engine state."""
    chars = sum(len(m.content) + len(m.reasoning or "") + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
                for m in messages)
    return BYTES_PER_CHAR * chars + BYTES_PER_MESSAGE * len(messages)


@dataclass(slots=True)
class Live:
    info: SessionInfo
    engine: Engine
    version: int = 0
    digest: str = ""
    """The store's digest at ``version`` (``store.base.chain``): names the content, not only its length."""
    events_seen: int = 0
    stored_handles: set[str] = field(default_factory=set)
    unstored: dict[str, str] = field(default_factory=dict)
    """Payloads (and links, under ``LINK`` + handle) that builds made and the store has not
    confirmed: each build writes them all, so a failed write is made good by the next build."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """Names this engine state in prompt ids: a prompt built elsewhere (another replica, or
    before the session was loaded again) never matches."""

    size: int = 0
    """The bytes this engine state is estimated to hold (``footprint`` of its history)."""
    sent_last: tuple[int, list[JSONDict], list[JSONDict]] | None = None
    """The serial, messages and tools of the last build, where it was sent rewritten for the
    profile's template: the next one is sent as what follows the messages the two share."""
    sent_memo: SentMemo = field(default_factory=SentMemo)
    """The last build's rewrite for the template, which the next one mostly repeats."""

    def prompt_id(self, serial: int) -> str:
        return f"{self.token}.{serial}"


class Replica:
    def __init__(self, store: SessionStore, tokenizers: Tokenizers, *, limit: int = 512,
                 limit_bytes: int = 1 << 30) -> None:
        self.store = store
        self.tokenizers = tokenizers
        self.limit = limit
        self.limit_bytes = limit_bytes
        memos.configure(memo_chars(limit_bytes))  # (process-wide: the replica made last sets it)
        self.used = 0
        """The summed ``size`` of the cached sessions."""
        self._live: OrderedDict[str, Live] = OrderedDict()
        self._live_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._live)

    def forget(self, sid: str) -> None:
        with self._live_lock:
            gone = self._live.pop(sid, None)
            if gone is not None:
                self.used -= gone.size

    def cached(self, sid: str) -> Live | None:
        with self._live_lock:
            return self._live.get(sid)

    def sync(self, sid: str) -> Live:
        """The session's engine state, caught up with the store in one read."""
        for _ in range(4):
            with self._live_lock:
                live = self._live.get(sid)
                if live is not None:
                    self._live.move_to_end(sid)
            if live is None:
                record, records = self.store.read(sid, since=0)
                live = self._new_live(record)
                with live.lock:
                    self._catch_up(live, records)
                    self._apply_events(live, record.events)
                if self._keep(live) is live:
                    return live
                continue  # another request cached this session first: sync that one
            with live.lock:
                try:
                    record, records = self.store.read(sid, since=live.version)
                except SessionNotFound:
                    self.forget(sid)
                    raise
                if (record.incarnation == live.info.record.incarnation and record.version >= live.version
                        and _same_line(live, record, records)):
                    self._catch_up(live, records)
                    live.digest = record.digest
                    self._apply_events(live, record.events)
                    return live
            self.forget(sid)  # replaced, rolled back (a store restored from a backup) or diverged
            # (a write this replica saw was lost in a failover, another took its index): load it again
        raise EtagMismatch("the session keeps being replaced; retry", metadata={"session": sid})

    def _new_live(self, record: SessionRecord) -> Live:
        info = SessionInfo.of(record)
        config = info.config
        counter = self.tokenizers.counter(config.tokenizer)
        return Live(info, Engine(counter, policy=config.policy, tools=config.tools), digest=record.digest)

    def _keep(self, live: Live) -> Live:
        with self._live_lock:
            current = self._live.get(live.info.id)
            if current is not None and current.info.record.incarnation == live.info.record.incarnation:
                return current  # another thread won the race; use its state
            if current is not None:
                self.used -= current.size
            self._live[live.info.id] = live
            self.used += live.size
            self._evict()
        return live

    def _grow(self, live: Live, messages: Sequence[Message]) -> None:
        """Count what ``messages``, just appended to ``live``, hold; evict to stay in bounds. The
        session is in use, so it becomes the most recently used (an append that found it cached
        did not go through ``sync``)."""
        added = footprint(messages)
        with self._live_lock:
            live.size += added
            if self._live.get(live.info.id) is live:
                self._live.move_to_end(live.info.id)
                self.used += added
                self._evict()

    def _evict(self) -> None:
        """Least recently used first, never the session used last (holding ``_live_lock``)."""
        while len(self._live) > self.limit or (self.used > self.limit_bytes and len(self._live) > 1):
            _, old = self._live.popitem(last=False)
            self.used -= old.size

    def written(self, live: Live, first_index: int, version: int, messages: Sequence[Message],
                facts: Sequence[Facts] | None, *, events: int = -1, digests: tuple[str, str] = ("", "")) -> bool:
        """Write-through: messages this replica just appended at ``first_index`` go to the live
        engine with the facts already computed, so the next request reads nothing back from the
        store. When another writer came between, the next sync reads the records instead; facts
        previewed against another history length are computed again. ``events``: the session's
        event count the append saw; events this engine has not applied are read now. ``digests``:
        the store's digest before and after the batch; written only onto this engine's own
        history. True when written."""
        with live.lock:
            if live.version != first_index or live.digest != digests[0]:
                return False
            live.engine.append(messages, facts)
            self._grow(live, messages)
            live.version, live.digest = version, digests[1]
            if events >= 0:
                self._apply_events(live, events)
            return True

    def _apply_events(self, live: Live, count: int) -> None:
        """Events that change what the engine keeps (planned edits supersede snapshots)."""
        if count <= live.events_seen:
            return
        for text in self.store.events(live.info.id, since=live.events_seen):
            event = json.loads(text)
            if event.get("kind") == "snapshot_superseded":
                live.engine.supersede(event["path"], at=event["at"])
        live.events_seen = count

    def _catch_up(self, live: Live, records: Sequence[str]) -> None:
        if not records:
            return
        cfg = live.info.config
        counter = live.engine.counter
        messages = []
        with self.tokenizers.lock(cfg.tokenizer):
            for text in records:
                raw, spec, tokens, pieces = StoredMessage.decode(text)
                m = from_openai(raw)
                if spec == cfg.spec:
                    counter.import_cost(m, tokens, pieces)
                messages.append(m)
            live.engine.append(messages)
        self._grow(live, messages)
        live.version += len(records)


def _same_line(live: Live, record: SessionRecord, records: Sequence[str]) -> bool:
    """The store's history continues this replica's: its digest is this one's chained over the
    records past it (unchecked where the store keeps no digest)."""
    return not record.digest or chain(live.digest, records) == record.digest
