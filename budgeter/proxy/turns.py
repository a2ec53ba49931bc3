"""The proxy's side of the session layer: reconcile a request with its session, build, append the
reply, and the stateless fit. Blocking (the store, the tokenizer): the app runs these in threads.

Only ``Sessions``' public operations are used (create, line, append, build, fit, count);
the reconciliation rule is in ``reconcile.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from budgeter.core.counting import Adaptation
from budgeter.core.engine import BuildResult
from budgeter.core.messages import Message, Repair, check_tools, from_openai_list
from budgeter.core.typing import JSONDict
from budgeter.errors import AlreadyExists, EtagMismatch, InvalidInput, SessionNotFound
from budgeter.proxy import reconcile as rc
from budgeter.proxy.memo import Bounded
from budgeter.sessions.model import make_etag
from budgeter.sessions.sessions import Line, Sessions

log = logging.getLogger("budgeter.proxy")


@dataclass(frozen=True, slots=True)
class Turn:
    session: str
    result: BuildResult
    etag: str
    """The session's etag right after the build: the reply is appended only if nothing came in
    between (a concurrent duplicate's reply is dropped, not stacked)."""
    appended: int
    forked: bool
    regenerate: bool = False
    """The request was already stored whole on a line: its answer is not stored, so that the line
    stays at the request for the next regenerate (the client's next turn brings the answer it kept)."""
    sent: tuple[list[JSONDict], list[JSONDict]] | None = None
    """The build's request as counted where the template needed a rewrite (``Built.sent``)."""
    root: str = ""
    """The conversation the request named, or the one derived from its first messages: the key its
    next turn waits on while this turn's reply is appended (``ProxySessions.reply_pending``)."""


@dataclass(frozen=True, slots=True)
class Request:
    """A chat-completions body, checked: messages parsed, the session's tools, and the repairs
    parsing made (lone surrogates made U+FFFD: the front door says so)."""

    messages: list[Message]
    tools: list[JSONDict]
    repairs: tuple[Repair, ...] = ()
    size: int = 0
    """The body's bytes, where known: what the proxy's memos of it count against their limit."""

    @classmethod
    def of(cls, body: dict[str, Any], *, extra_tools: Sequence[JSONDict] = (), size: int = 0) -> Request:
        cls.check(body)
        repairs: list[Repair] = []
        messages = from_openai_list(body["messages"], repairs=repairs)
        return cls.made(body, messages, repairs, extra_tools=extra_tools, size=size)

    @classmethod
    def made(cls, body: dict[str, Any], messages: list[Message], repairs: Sequence[Repair], *,
             extra_tools: Sequence[JSONDict] = (), size: int = 0) -> Request:
        """The request of ``body`` with its messages parsed already (``intake``)."""
        if not messages:
            raise InvalidInput("messages must not be empty", field="messages")
        tools = check_tools(body.get("tools") or [], field="tools")
        return cls(messages, [*tools, *extra_tools], tuple(repairs), size)

    @staticmethod
    def check(body: dict[str, Any]) -> None:
        """The fields the proxy reads itself: refused here when ill-typed, never sent on (a server
        taking ``"stream": "yes"`` as true would stream to a proxy reading a completion)."""
        if "messages" not in body:
            raise InvalidInput("messages is required", field="messages")
        if not isinstance(body.get("stream"), bool | None):
            raise InvalidInput("stream must be true or false", field="stream")
        for name in ("max_tokens", "max_completion_tokens"):  # the recall round does arithmetic with it
            value = body.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidInput(f"{name} must be an integer", field=name)


class ProxySessions:
    def __init__(self, sessions: Sessions, *, tokenizer: str, policy: dict[str, Any], ttl: float,
                 lines: int = 512, max_bytes: int = 1 << 29) -> None:
        self.sessions = sessions
        self.tokenizer = sessions.tokenizers.name(tokenizer)
        self.policy = policy
        self.ttl = ttl
        self._seen: Bounded[str, rc.Seen] = Bounded(entries=lines, max_bytes=max_bytes)
        """Per line, what its last request was compared with (``rc.Seen``), counted as twice the
        request's body: a memo of comparisons, never a verdict (the line is read from the store
        each turn)."""
        self._fork_id = rc.ForkIds(Bounded(entries=lines, max_bytes=max_bytes))
        self._replies: dict[str, futures.Future[bool]] = {}
        """Per conversation, the append of its last reply while it runs (``reply_pending``)."""
        self._replies_lock = threading.Lock()

    # -- a turn ----------------------------------------------------------------------------------

    def turn(self, request: Request, *, session: str = "") -> Turn:
        """Reconcile, append the new suffix once, build."""
        root = session or rc.derived_id(request.messages, request.tools)
        self._settle(root)
        appended = None
        for _ in range(2):
            line, stored, regenerate = self._resolve(root, request)
            suffix = request.messages[stored:]
            try:
                if suffix:
                    appended = self.sessions.append(
                        line.id, suffix, request_id=rc.request_id(line.id, stored, suffix),
                        etag=make_etag(stored, line.incarnation))
                break
            except EtagMismatch:  # another request appended meanwhile: reconcile again
                continue
        else:
            raise EtagMismatch("the session changed while this request was being added; retry",
                               metadata={"session": line.id})
        built = self.sessions.build(line.id, after=appended)
        return Turn(line.id, built.result, built.info.etag, len(suffix), line.id != root, regenerate, built.sent,
                    root)

    def reply_pending(self, turn: Turn, pending: futures.Future[bool]) -> None:
        """``pending`` appends ``turn``'s reply after the response went out; the conversation's next
        turn waits for it (``turn``), so that it never overtakes the append. A client can only send
        that turn once it has the reply, so the append was handed to a worker first and no worker
        waits on work queued behind it."""
        root = turn.root
        with self._replies_lock:
            self._replies[root] = pending

        def done(finished: futures.Future[bool]) -> None:
            with self._replies_lock:
                if self._replies.get(root) is finished:
                    del self._replies[root]
        pending.add_done_callback(done)

    def _settle(self, root: str) -> None:
        with self._replies_lock:
            pending = self._replies.get(root)
        if pending is not None:
            futures.wait([pending])

    def settled(self, timeout: float | None = None) -> bool:
        """Wait until every reply handed over is appended (shutdown, and readers that must see it);
        False if some were still running after ``timeout`` seconds."""
        with self._replies_lock:
            pending = list(self._replies.values())
        return not futures.wait(pending, timeout).not_done

    def _resolve(self, root: str, request: Request) -> tuple[Line, int, bool]:
        """The line the request extends, how many of the request's messages it already holds, and
        whether the request was found stored whole on a line on the way (a regenerate, or a retry
        of a request already answered)."""
        sid, regenerate = root, False
        for _ in range(rc.MAX_FORKS):
            line = self._line(sid, request)
            assert line is not None
            at = self._match(line, request)
            if at.extends:
                return line, at.diverges_at, regenerate
            regenerate = regenerate or at.diverges_at >= len(request.messages)
            sid = self._fork_of(root, sid, request, at)
        raise InvalidInput(f"the request diverges from {rc.MAX_FORKS} stored lines of session {root!r}; "
                           "name a new session with X-Budgeter-Session", field="messages",
                           reason="TOO_MANY_FORKS")

    def _match(self, line: Line, request: Request) -> rc.Match:
        """``rc.match``, passing over the pairs of messages found same on this line before."""
        seen = self._seen.get(line.id)
        at = rc.match(line.history, request.messages, same_tools=list(line.tools) == request.tools, seen=seen)
        self._seen.put(line.id, rc.Seen(line.history, tuple(request.messages[:at.diverges_at])), 2 * request.size)
        return at

    def _fork_of(self, root: str, sid: str, request: Request, at: rc.Match) -> str:
        """A request that extends a line cut short by a retry continues in that line's fork. A
        request stored whole on line ``sid`` (a regenerate) goes to the fork of ``sid`` that holds
        just the request: the same one for every later regenerate, since no answer is stored there."""
        if at.diverges_at >= len(request.messages):
            return self._fork_id(sid, request.messages, request.tools, at, size=request.size)
        cut = rc.Match(False, at.diverges_at)
        retried = self._fork_id(root, request.messages[:at.diverges_at], request.tools, cut, size=request.size)
        line = self._line(retried, request, create=False)
        if line is not None and self._match(line, request).extends:
            return retried
        return self._fork_id(root, request.messages, request.tools, at, size=request.size)

    def _line(self, sid: str, request: Request, *, create: bool = True) -> Line | None:
        """The stored line ``sid``; a missing session is created (empty, with the request's tools)."""
        try:
            return self.sessions.line(sid)
        except SessionNotFound:
            if not create:
                return None
            try:
                info = self.sessions.create(session_id=sid, tokenizer=self.tokenizer, policy=self.policy,
                                            tools=request.tools, ttl=self.ttl)
                return Line(sid, (), tuple(request.tools), info.record.incarnation, 0)
            except AlreadyExists:
                return self.sessions.line(sid)

    def check_reply(self, reply: Message) -> None:
        """The append's limits on the reply (``LimitExceeded``), checked before the response goes out."""
        self.sessions.check_messages([reply])

    def append_reply(self, turn: Turn, reply: Message) -> bool:
        """Append the upstream's reply; False when the session moved on meanwhile, or the turn was
        a regenerate (``Turn.regenerate``)."""
        if turn.regenerate:
            return False
        position = int(turn.etag.split(".", 1)[0])
        try:
            self.sessions.append(turn.session, [reply], etag=turn.etag,
                                 request_id=rc.request_id(turn.session, position, [reply], kind="reply"))
        except EtagMismatch:
            log.info("reply not stored: session %s changed during the turn", turn.session)
            return False
        return True

    # -- stateless ---------------------------------------------------------------------------------

    def fit(self, request: Request, *, overrides: dict[str, Any] | None = None) -> BuildResult:
        return self.sessions.fit(self.tokenizer, request.messages, request.tools, {**self.policy, **(overrides or {})})

    def wire(self, result: BuildResult, tools: Sequence[JSONDict],
             sent: tuple[list[JSONDict], list[JSONDict]] | None = None
             ) -> tuple[list[JSONDict], list[JSONDict], tuple[Adaptation, ...]]:
        """The prompt's messages and tools as sent upstream: what the counter counted
        (``core.counting.sent``), so the server renders exactly that and never rejects it; and the
        rewrites that made it, where it was rewritten. ``sent``: the rewrite the build already
        made (``Turn.sent``), not made again."""
        if sent is not None:
            return sent[0], sent[1], self.sessions.adaptations(self.tokenizer)
        return self.sessions.sent(self.tokenizer, result.messages, tools)

    def count(self, body: dict[str, Any], tools: Sequence[JSONDict]) -> int:
        """The exact count of a body's messages with ``tools`` (a recall round's next body)."""
        messages = from_openai_list(body["messages"])
        return self.sessions.count(tokenizer=self.tokenizer, messages=messages, tools=tools).tokens
