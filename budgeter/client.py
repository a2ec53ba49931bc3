"""A small synchronous client that speaks plain OpenAI-style message dicts.

    from budgeter.client import Client

    session = Client("127.0.0.1:50051").create_session(tools=TOOLS, window=32768)
    session.append([{"role": "user", "content": task}])
    while True:
        prompt = session.prompt()                       # fits the window, exact count
        reply = llm.chat.completions.create(model=MODEL, **prompt.body)
        session.append([reply.choices[0].message.model_dump(exclude_none=True)])
        ...

``AsyncClient`` has the same methods as coroutines (grpc.aio). Errors come back as
``ClientError`` with the server's ``code``, ``reason`` and ``metadata``.
Appends carry a fresh ``request_id`` and are retried with it when the server is briefly
unavailable, so a retry never duplicates history.

Retries: every call but CreateSession and DeleteSession is retried on UNAVAILABLE and on
CANCELLED, which this client never asks for (a deadline is DEADLINE_EXCEEDED): a server that stops
kills the calls it had received but not yet started, and grpc core reports them CANCELLED. The
backoff goes from 0.1 s doubling to 2 s, for up to ``retry_for`` seconds (10 s: a Redis Cluster
failover promotes a replica in about 4 s), always with the same request.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.json_format import MessageToDict

from budgeter.affinity import HEADER, OPTIONS, session_of
from budgeter.core.jsonargs import loads
from budgeter.core.messages import Repair, from_openai, repaired_note, to_openai
from budgeter.errors import BudgeterError
from budgeter.shapes import append_from_pb, plan_from_pb, report_from_pb, suggestion_of, verdict_from_pb
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc
from budgeter.wire import error_info, message_from_pb, new_message_to_pb

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)  # why CANCELLED: "Retries" above


def backoff(retries: int | None, retry_for: float) -> Iterable[float]:
    """The pause before each retry: 0.1 s doubling to 2 s, while the next attempt starts within
    ``retry_for`` seconds of the first and there are at most ``retries`` (None: no count)."""
    start = time.monotonic()
    delay, n = 0.1, 0
    while retries is None or n < retries:
        if time.monotonic() + delay - start > retry_for:
            return
        yield delay
        delay, n = min(delay * 2, 2.0), n + 1


class ClientError(BudgeterError):
    def __init__(self, err: grpc.RpcError) -> None:
        info = error_info(err)
        super().__init__(err.details() or str(err.code()), metadata=dict(info.metadata) if info else {})
        self.code: grpc.StatusCode = err.code()
        self.reason = info.reason if info else err.code().name


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tokens: int
    budget: int
    extends_previous: bool
    prefix_changed_at: int
    report: dict[str, Any]
    appended: dict[str, Any] | None = None
    """With ``prompt(append=...)``: the append's result, as ``append`` returns it."""
    prompt_id: str = ""
    """Pass this prompt as ``prompt(since=...)`` to receive only what the next one changes."""

    @property
    def body(self) -> dict[str, Any]:
        """Keyword arguments for a chat-completions call: messages (and tools)."""
        return {"messages": self.messages, **({"tools": self.tools} if self.tools else {})}


T = TypeVar("T")
Op = Generator[tuple[str, Any, bool], Any, T]
"""An operation: yields (method, request, retry) for each RPC, receives the response, and
returns the result. ``Client`` runs operations with blocking calls, ``AsyncClient`` with awaits,
so both share one definition of every method."""


def operation(fn: Callable[..., Op[Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def method(self: Client, *args: Any, **kw: Any) -> Any:
        return self._run(fn(self, *args, **kw))

    return method


class Client:
    _grpc: Any = grpc
    """Where the channel comes from: grpc, or grpc.aio for ``AsyncClient``."""

    def __init__(self, target: str = "127.0.0.1:50051", *, timeout: float = 30.0,
                 channel: grpc.Channel | None = None, token: str | None = None,
                 tls_ca: str | Path | None = None, tls_cert: str | Path | None = None,
                 tls_key: str | Path | None = None, retries: int | None = None,
                 retry_for: float = 10.0) -> None:
        """``token``: bearer token of a server with authentication. ``tls_ca``: connect with TLS,
        trusting this CA; ``tls_cert``/``tls_key``: a client certificate (mutual TLS).
        ``retry_for``: how long a call is retried (module docstring); ``retries``: at most this
        many retries (0: none)."""
        creds = None
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(
                root_certificates=Path(tls_ca).read_bytes(),
                private_key=Path(tls_key).read_bytes() if tls_key else None,
                certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None)
        self.affinity = channel is None
        """Every call that names a session carries it as ``x-session-id`` for an L7 balancer to
        hash on (session affinity: deploy/OPERATIONS.md), put there by the client itself on the
        channel it opens (an interceptor channel costs a call more client CPU: ``bench_load``);
        a channel given is used as it is (``affinity_channel`` makes one that adds the header)."""
        self.channel = channel or (self._grpc.secure_channel(target, creds, options=OPTIONS) if creds
                                   else self._grpc.insecure_channel(target, options=OPTIONS))
        self.stub = pb_grpc.BudgeterServiceStub(self.channel)
        self.timeout = timeout
        self.retries = retries
        self.retry_for = retry_for
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()

    def _metadata(self, request: Any) -> tuple[tuple[str, str], ...]:
        """The call's metadata: the bearer token, and the session the request names."""
        sid = session_of(request) if self.affinity else ""
        return (*self.metadata, (HEADER, sid)) if sid else self.metadata

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    @staticmethod
    def _rpc(method: str, request: Any, *, retry: bool = True) -> Op[Any]:
        """One RPC inside an operation: the runner performs it (retried unless ``retry`` is
        False: a create or a delete done twice does not answer as once) and sends back the
        response."""
        return (yield (method, request, retry))

    def _run(self, op: Op[T]) -> T:
        """Drive an operation with blocking calls (``AsyncClient`` drives it with awaits)."""
        try:
            call = next(op)
            while True:
                call = op.send(self._call(*call))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _call(self, method: str, request: Any, retry: bool = True) -> Any:
        metadata = self._metadata(request)
        pauses = iter(backoff(self.retries if retry else 0, self.retry_for))
        while True:
            try:
                return getattr(self.stub, method)(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as err:
                pause = next(pauses, None) if err.code() in RETRYABLE else None
                if pause is None:
                    raise ClientError(err) from None
                time.sleep(pause)

    # -- sessions ------------------------------------------------------------------------------

    @operation
    def create_session(self, *, session_id: str = "", tokenizer: str = "",
                       tools: Sequence[Mapping[str, Any]] = (), ttl: float | None = None,
                       file_tools: Mapping[str, Iterable[str]] | None = None,
                       **policy: Any) -> Op[SessionHandle]:
        """``policy``: window, reserve, low_water, protect_tail_turns, keep_latest_failure,
        shrink_min_chars, shrink_keep_chars, path_root. ``file_tools``: {"reads": [...], "writes": [...],
        "edits": [...]} tool names."""
        request = pb.CreateSessionRequest(session_id=session_id, tokenizer=tokenizer,
                                          policy=pb.Policy(**policy),
                                          tools_json=json.dumps(list(tools), ensure_ascii=False))
        if file_tools:
            request.policy.file_tools.CopyFrom(pb.FileTools(
                reads=list(file_tools.get("reads", ())), writes=list(file_tools.get("writes", ())),
                edits=list(file_tools.get("edits", ()))))
        if ttl is not None:
            request.ttl.FromNanoseconds(int(ttl * 1e9))
        session = (yield from self._rpc("CreateSession", request, retry=False)).session
        return SessionHandle(self, session.name.removeprefix("sessions/"))

    def session(self, session_id: str) -> SessionHandle:
        return SessionHandle(self, session_id)

    @operation
    def get_session(self, session_id: str) -> Op[dict[str, Any]]:
        s = (yield from self._rpc("GetSession", pb.GetSessionRequest(name=f"sessions/{session_id}"))).session
        out = MessageToDict(s, preserving_proto_field_name=True,
                            always_print_fields_with_no_presence=True)
        out["message_count"] = int(out["message_count"])
        return out

    @operation
    def list_sessions(self, *, page_size: int = 100) -> Op[list[str]]:
        """Every session id, page by page."""
        ids: list[str] = []
        token = ""
        while True:
            page = yield from self._rpc("ListSessions",
                                        pb.ListSessionsRequest(page_size=page_size, page_token=token))
            ids += [s.name.removeprefix("sessions/") for s in page.sessions]
            token = page.next_page_token
            if not token:
                return ids

    @operation
    def delete_session(self, session_id: str) -> Op[None]:
        yield from self._rpc("DeleteSession", pb.DeleteSessionRequest(name=f"sessions/{session_id}"), retry=False)

    # -- history and prompts -------------------------------------------------------------------

    @operation
    def append(self, session_id: str, messages: Sequence[Mapping[str, Any]], *,
               request_id: str | None = None, etag: str = "") -> Op[dict[str, Any]]:
        typed, notes = _outgoing(messages)
        request = pb.AppendMessagesRequest(
            session=f"sessions/{session_id}", request_id=request_id or uuid.uuid4().hex, etag=etag,
            messages=typed)
        response = (yield from self._rpc("AppendMessages", request))
        return _noted(append_from_pb(response, _arguments(request.messages)), notes)

    @operation
    def prompt(self, session_id: str, *, append: Sequence[Mapping[str, Any]] = (),
               request_id: str | None = None, since: Prompt | None = None, **overrides: Any) -> Op[Prompt]:
        """The prompt to send now. ``append``: messages to append first, in the same call.
        ``since``: the previous prompt of this session, when the caller still holds it unchanged;
        the server then sends only the messages that changed, and the new prompt shares the
        unchanged message dicts with it."""
        request = pb.BuildPromptRequest(session=f"sessions/{session_id}", view=pb.PROMPT_VIEW_JSON,
                                        known_prompt=since.prompt_id if since is not None else "",
                                        accept_body_delta=since is not None)
        typed, notes = _outgoing(append)
        if append:
            request.messages.extend(typed)
            request.request_id = request_id or uuid.uuid4().hex
        if overrides:
            request.overrides.CopyFrom(pb.PromptOverrides(**overrides))
        r = (yield from self._rpc("BuildPrompt", request))
        body = loads(r.body_json)
        appended = _noted(append_from_pb(r.appended, _arguments(request.messages)), notes) if append else None
        messages, tools = body["messages"], body.get("tools", [])
        kept = r.kept_messages or r.kept_body_messages  # (the body is the prompt's messages, or their rewrite)
        if kept and since is not None:  # the server sent what follows the kept messages
            messages, tools = since.messages[:kept] + messages, since.tools
        return Prompt(messages, tools, r.tokens, r.budget, r.extends_previous, r.prefix_changed_at,
                      _noted(report_from_pb(r.report), notes), appended, r.prompt_id)

    @operation
    def payload(self, session_id: str, handle: str) -> Op[str]:
        return (yield from self._rpc("GetPayload", pb.GetPayloadRequest(session=f"sessions/{session_id}",
                                                             handle=handle))).content

    @operation
    def count_tokens(self, messages: Sequence[Mapping[str, Any]] = (), *, text: str = "",
                     tokenizer: str = "", tools: Sequence[Mapping[str, Any]] = ()) -> Op[int]:
        request = pb.CountTokensRequest(
            tokenizer=tokenizer, text=text, tools_json=json.dumps(list(tools)) if tools else "",
            messages=[new_message_to_pb(from_openai(m, index=i)) for i, m in enumerate(messages)])
        return int((yield from self._rpc("CountTokens", request)).tokens)

    # -- guard rails ---------------------------------------------------------------------------

    @operation
    def validate_tool_call(self, tool_call: Mapping[str, Any], *, session_id: str = "",
                           tools: Sequence[Mapping[str, Any]] = (), finish_reason: str = ""
                           ) -> Op[dict[str, Any]]:
        """``tool_call``: an OpenAI tool call ({"id", "function": {"name", "arguments"}})."""
        fn = tool_call.get("function", tool_call)
        request = pb.ValidateToolCallRequest(
            session=f"sessions/{session_id}" if session_id else "", finish_reason=finish_reason,
            tools_json=json.dumps(list(tools), ensure_ascii=False) if tools else "",
            tool_call=pb.ToolCall(id=str(tool_call.get("id", "")), name=str(fn.get("name", "")),
                                  arguments=str(fn.get("arguments", ""))))
        response = yield from self._rpc("ValidateToolCall", request)
        return verdict_from_pb(response, id=request.tool_call.id, name=request.tool_call.name)

    @operation
    def suggest_path(self, content: str, *, session_id: str = "", tool: str = "") -> Op[dict[str, Any]]:
        request = pb.SuggestPathRequest(session=f"sessions/{session_id}" if session_id else "",
                                        content=content, tool=tool)
        return suggestion_of((yield from self._rpc("SuggestPath", request)))

    @operation
    def plan_edits(self, edits: Sequence[Mapping[str, Any]], *, snapshot: str = "",
                   snapshot_handle: str = "", session_id: str = "", path: str = "") -> Op[dict[str, Any]]:
        """``edits``: [{"start_line", "end_line", "body", "expected_old"?}]."""
        request = pb.PlanEditsRequest(
            session=f"sessions/{session_id}" if session_id else "", snapshot=snapshot,
            snapshot_handle=snapshot_handle, path=path,
            edits=[pb.LineEdit(**{k: e[k] for k in ("start_line", "end_line", "body", "expected_old")
                                  if k in e}) for e in edits])
        return plan_from_pb((yield from self._rpc("PlanEdits", request)))

    @operation
    def profile(self, session_id: str, *, tokenizers: Sequence[str] = (), window: int = 0,
                top: int = 10) -> Op[list[dict[str, Any]]]:
        """The ``budgeter profile --json`` figures of a stored session, one dict per tokenizer."""
        request = pb.ProfileSessionRequest(session=f"sessions/{session_id}", tokenizers=list(tokenizers),
                                           window=window, top=top)
        return [json.loads(r.profile_json) for r in (yield from self._rpc("ProfileSession", request)).reports]

    @operation
    def events(self, session_id: str) -> Op[list[dict[str, Any]]]:
        r = (yield from self._rpc("ListSessionEvents", pb.ListSessionEventsRequest(session=f"sessions/{session_id}")))
        return [json.loads(e.event_json) for e in r.events]

    @operation
    def tokenizers(self) -> Op[list[dict[str, Any]]]:
        r = (yield from self._rpc("ListTokenizers", pb.ListTokenizersRequest()))
        return [MessageToDict(t, preserving_proto_field_name=True) for t in r.tokenizers]


class AsyncClient(Client):
    """``Client`` for asyncio (grpc.aio): the same methods and arguments, as coroutines.

        async with AsyncClient("127.0.0.1:50051") as client:
            session = await client.create_session(tools=TOOLS)
            prompt = await session.prompt(append=[{"role": "user", "content": task}])
    """

    _grpc: Any = grpc.aio

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:  # type: ignore[override]
        await self.channel.close()

    def _run(self, op: Op[T]) -> Any:
        async def drive() -> T:
            try:
                call = next(op)
                while True:
                    call = op.send(await self._acall(*call))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

        return drive()

    async def _acall(self, method: str, request: Any, retry: bool = True) -> Any:
        metadata = self._metadata(request)
        pauses = iter(backoff(self.retries if retry else 0, self.retry_for))
        while True:
            try:
                return await getattr(self.stub, method)(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as err:
                pause = next(pauses, None) if err.code() in RETRYABLE else None
                if pause is None:
                    raise ClientError(err) from None
                await asyncio.sleep(pause)


class SessionHandle:
    """One session: ``append`` dicts, get the ``prompt`` to send."""

    def __init__(self, client: Client, session_id: str) -> None:
        """With an ``AsyncClient``, every method returns a coroutine."""
        self.client = client
        self.id = session_id

    def append(self, messages: Sequence[Mapping[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.client.append(self.id, messages, **kw)

    def prompt(self, **kw: Any) -> Prompt:
        return self.client.prompt(self.id, **kw)

    def payload(self, handle: str) -> str:
        return self.client.payload(self.id, handle)

    def delete(self) -> None:
        self.client.delete_session(self.id)

    def validate_tool_call(self, tool_call: Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        return self.client.validate_tool_call(tool_call, session_id=self.id, **kw)

    def suggest_path(self, content: str, **kw: Any) -> dict[str, Any]:
        return self.client.suggest_path(content, session_id=self.id, **kw)

    def plan_edits(self, edits: Sequence[Mapping[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.client.plan_edits(edits, session_id=self.id, **kw)

    def events(self) -> list[dict[str, Any]]:
        return self.client.events(self.id)


def _outgoing(messages: Sequence[Mapping[str, Any]]) -> tuple[list[pb.Message], list[str]]:
    """Messages for a request, and the note saying what was repaired on the way: a protobuf string
    cannot carry a lone surrogate, so it is made U+FFFD here, not on the server (``Repair``)."""
    repairs: list[Repair] = []
    typed = [new_message_to_pb(from_openai(m, index=i, repairs=repairs)) for i, m in enumerate(messages)]
    return typed, [repaired_note(repairs)] if repairs else []


def _noted(result: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``result`` (an append or a report) with the client's own ``notes`` first."""
    return {**result, "notes": [*notes, *result.get("notes", ())]} if notes else result


def _arguments(messages: Sequence[pb.Message]) -> dict[str, str]:
    return {c.id: c.arguments for m in messages for c in m.tool_calls}


def messages_of(response: pb.BuildPromptResponse) -> list[dict[str, Any]]:
    """Typed prompt messages -> OpenAI dicts (the same as ``body_json``'s messages)."""
    return [to_openai(message_from_pb(m, i)) for i, m in enumerate(response.messages)]
