"""budgeter.affinity: each call names its session in x-session-id, for a balancer to hash on
(the local topology test checks the placement through a real nginx)."""

from __future__ import annotations

import grpc

from budgeter.affinity import HEADER, SessionAffinity, affinity_channel, session_of
from budgeter.client import Client
from budgeter.v1 import budgeter_pb2 as pb


def test_session_of_each_request_shape():
    assert session_of(pb.AppendMessagesRequest(session="sessions/a")) == "a"
    assert session_of(pb.BuildPromptRequest(session="sessions/a")) == "a"
    assert session_of(pb.GetSessionRequest(name="sessions/b")) == "b"
    assert session_of(pb.CreateSessionRequest(session_id="c")) == "c"
    assert session_of(pb.CreateSessionRequest()) == session_of(pb.ListTokenizersRequest()) == ""


def test_calls_through_a_real_server_carry_the_header(server):
    seen: list[tuple[str, str]] = []

    class Record(grpc.UnaryUnaryClientInterceptor):  # sits after SessionAffinity, sees what is sent
        def intercept_unary_unary(self, continuation, details, request):
            seen.append((details.method.rsplit("/", 1)[-1], dict(details.metadata or ()).get(HEADER, "")))
            return continuation(details, request)

    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), SessionAffinity(), Record())
    with Client(channel=channel) as c:
        s = c.create_session(session_id="s1")
        s.append([{"role": "user", "content": "hi"}])
        assert s.prompt().messages == [{"role": "user", "content": "hi"}]
        c.tokenizers()
    assert seen == [("CreateSession", "s1"), ("AppendMessages", "s1"), ("BuildPrompt", "s1"),
                    ("ListTokenizers", "")]
    with Client(channel=affinity_channel(server.target)) as c:  # the ready-made channel works too
        assert c.get_session("s1")["message_count"] in (1, "1")
