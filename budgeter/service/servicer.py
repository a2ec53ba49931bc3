"""The gRPC servicer: thin methods that convert, call ``Sessions`` and convert back."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc

from budgeter.core.jsonargs import dumps_text
from budgeter.core.messages import Message, Repair, repaired_note
from budgeter.errors import InvalidInput, StoreUnavailable
from budgeter.service import convert as cv
from budgeter.service.auth import Auth
from budgeter.service.errors import code_for, to_status
from budgeter.sessions.guards import Guards
from budgeter.sessions.metrics import Metrics
from budgeter.sessions.sessions import TENANT, AppendResult, Sessions
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc

R = TypeVar("R")
access = logging.getLogger("budgeter.rpc")


@dataclass(frozen=True, slots=True)
class Malformed:
    """A request whose bytes do not parse as its message type (kept to answer INVALID_ARGUMENT
    instead of grpc's own INTERNAL for a failed deserializer)."""

    type_name: str
    error: Exception


def lenient(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, invalid UTF-8 in a string field, ...
            return Malformed(cls.DESCRIPTOR.full_name, exc)

    return parse


def handlers(servicer: BudgeterServicer) -> grpc.GenericRpcHandler:
    """Method handlers for every RPC of the service, with lenient request parsing."""
    service = pb.DESCRIPTOR.services_by_name["BudgeterService"]
    table = {m.name: grpc.unary_unary_rpc_method_handler(
        getattr(servicer, m.name), request_deserializer=lenient(getattr(pb, m.input_type.name)),
        response_serializer=getattr(pb, m.output_type.name).SerializeToString) for m in service.methods}
    return grpc.method_handlers_generic_handler(service.full_name, table)


def rpc(method: Callable[..., R]) -> Callable[..., R]:
    """Times the call and turns every exception into a status with ErrorInfo."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: BudgeterServicer, request: Any, context: grpc.ServicerContext) -> R:
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        scope = None
        reason = ""
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:  # it waited in the queue past its deadline
            self.metrics.rpc_seconds.labels(name, "DEADLINE_EXCEEDED").observe(0.0)
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before the call started")
        flying = self.metrics.rpcs_in_flight.labels(name)
        flying.inc()
        try:
            scope = TENANT.set(self.auth.tenant(context))
            if isinstance(request, Malformed):
                raise InvalidInput(f"the request is not a valid {request.type_name}: {request.error}",
                                   reason="MALFORMED_REQUEST")
            return method(self, request, context)
        except Exception as exc:
            code = code_for(exc)
            reason = getattr(exc, "reason", "INTERNAL")
            if isinstance(exc, StoreUnavailable):
                self.metrics.store_errors.labels(self.sessions.store.name).inc()
            context.abort_with_status(to_status(exc))
            raise  # not reached: abort_with_status raises
        finally:
            flying.dec()
            if scope is not None:
                TENANT.reset(scope)
            seconds = time.perf_counter() - start
            self.metrics.rpc_seconds.labels(name, code.name).observe(seconds)
            # method, status and reason only: never message bodies, arguments or error texts
            access.debug("%s %s%s %.2f ms", name, code.name, f" {reason}" if reason else "", seconds * 1000)

    return wrapper


class BudgeterServicer(pb_grpc.BudgeterServiceServicer):
    def __init__(self, sessions: Sessions, metrics: Metrics, auth: Auth | None = None) -> None:
        self.sessions = sessions
        self.auth = auth or Auth()
        self.guards = Guards(sessions)
        self.metrics = metrics

    @rpc
    def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.CreateSessionResponse:
        info = self.sessions.create(
            session_id=request.session_id, tokenizer=request.tokenizer,
            policy=cv.policy_from_pb(request.policy), tools=cv.tools_from_json(request.tools_json),
            ttl=cv.ttl_from_pb(request.HasField("ttl"), request.ttl))
        return pb.CreateSessionResponse(session=cv.session_to_pb(info))

    @rpc
    def GetSession(self, request: pb.GetSessionRequest, context: Any) -> pb.GetSessionResponse:
        return pb.GetSessionResponse(session=cv.session_to_pb(self.sessions.get(request.name)))

    @rpc
    def ListSessions(self, request: pb.ListSessionsRequest, context: Any) -> pb.ListSessionsResponse:
        infos, token = self.sessions.list_sessions(page_size=request.page_size, page_token=request.page_token)
        return pb.ListSessionsResponse(sessions=[cv.session_to_pb(i) for i in infos],
                                       next_page_token=token)

    @rpc
    def DeleteSession(self, request: pb.DeleteSessionRequest, context: Any) -> pb.DeleteSessionResponse:
        self.sessions.delete(request.name)
        return pb.DeleteSessionResponse()

    def _append(self, session: str, messages: Sequence[pb.Message], request_id: str,
                etag: str = "") -> AppendResult:
        """AppendMessages, also run by BuildPrompt when its request carries messages."""
        self.sessions.check_sizes([m.ByteSize() for m in messages])  # before any parsing
        parsed, notes = self._parsed(messages)
        result = self.sessions.append(session, parsed, request_id=request_id, etag=etag)
        if not result.replayed:
            self.metrics.tokens_counted.labels(result.tokenizer).inc(
                sum(m.tokens for m in result.messages))
        return replace(result, notes=notes) if notes else result

    def _parsed(self, messages: Sequence[pb.Message]) -> tuple[list[Message], tuple[str, ...]]:
        """The request's messages, and the note saying what was repaired on the way in (a lone
        surrogate can only come as a ``"\\ud800"`` escape in arguments: protobuf strings are UTF-8)."""
        repairs: list[Repair] = []
        parsed = cv.messages_from_pb(messages, repairs=repairs)
        self.metrics.repaired(repairs)
        return parsed, (repaired_note(repairs),) if repairs else ()

    @rpc
    def AppendMessages(self, request: pb.AppendMessagesRequest, context: Any) -> pb.AppendMessagesResponse:
        return cv.append_to_pb(self._append(request.session, request.messages, request.request_id, request.etag))

    @rpc
    def BuildPrompt(self, request: pb.BuildPromptRequest, context: Any) -> pb.BuildPromptResponse:
        overrides = cv.overrides_from_pb(request.overrides) if request.HasField("overrides") else None
        appended = (self._append(request.session, request.messages, request.request_id)
                    if request.messages else None)
        built = self.sessions.build(request.session, overrides=overrides, after=appended,
                                    known=request.known_prompt, body_delta=request.accept_body_delta)
        self.metrics.built(built.result)
        out = cv.build_to_pb(built, request.view)
        if appended is not None:
            out.appended.CopyFrom(cv.append_to_pb(appended))
            out.report.notes.extend(appended.notes)
        return out

    @rpc
    def CountTokens(self, request: pb.CountTokensRequest, context: Any) -> pb.CountTokensResponse:
        messages, notes = self._parsed(request.messages)
        result = self.sessions.count(tokenizer=request.tokenizer, messages=messages,
                                     text=request.text, tools=cv.tools_from_json(request.tools_json))
        self.metrics.tokens_counted.labels(result.tokenizer).inc(result.tokens)
        out = cv.count_to_pb(result)
        out.notes.extend(notes)
        return out

    @rpc
    def ListTokenizers(self, request: pb.ListTokenizersRequest, context: Any) -> pb.ListTokenizersResponse:
        return pb.ListTokenizersResponse(tokenizers=[
            pb.TokenizerProfile(name=p.name, spec=p.spec, is_default=p.is_default,
                                description=p.description)
            for p in self.sessions.tokenizers.all()])

    @rpc
    def GetPayload(self, request: pb.GetPayloadRequest, context: Any) -> pb.GetPayloadResponse:
        content = self.sessions.payload(request.session, request.handle)
        return pb.GetPayloadResponse(handle=request.handle, content=content)

    @rpc
    def ValidateToolCall(self, request: pb.ValidateToolCallRequest, context: Any
                         ) -> pb.ValidateToolCallResponse:
        verdict = self.guards.validate(
            cv.tool_call_from_pb(request.tool_call), session=request.session,
            tools=cv.tools_from_json(request.tools_json), finish_reason=request.finish_reason or None)
        return cv.verdict_to_pb(verdict)

    @rpc
    def SuggestPath(self, request: pb.SuggestPathRequest, context: Any) -> pb.SuggestPathResponse:
        suggestion = self.guards.suggest_path(request.content, session=request.session, tool=request.tool)
        return cv.suggestion_to_pb(suggestion)

    @rpc
    def PlanEdits(self, request: pb.PlanEditsRequest, context: Any) -> pb.PlanEditsResponse:
        plan = self.guards.plan_edits(cv.edits_from_pb(request.edits), snapshot=request.snapshot,
                                      snapshot_handle=request.snapshot_handle, session=request.session,
                                      path=request.path)
        return cv.plan_to_pb(plan)

    @rpc
    def ListSessionEvents(self, request: pb.ListSessionEventsRequest, context: Any
                          ) -> pb.ListSessionEventsResponse:
        return pb.ListSessionEventsResponse(events=[
            pb.SessionEvent(kind=e.get("kind", ""), event_json=dumps_text(e))
            for e in self.guards.events(request.session)])

    @rpc
    def ProfileSession(self, request: pb.ProfileSessionRequest, context: Any) -> pb.ProfileSessionResponse:
        reports = self.sessions.profile(request.session, tokenizers=list(request.tokenizers),
                                        window=request.window, top=request.top)
        return pb.ProfileSessionResponse(reports=[
            pb.TokenizerReport(tokenizer=r["tokenizer"], tokens=r["tokens"],
                               profile_json=dumps_text(r)) for r in reports])
