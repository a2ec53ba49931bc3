"""budgeter.affinity: each call names its session in x-session-id, for a balancer to hash on
(the local topology test checks the placement through a real nginx)."""

from __future__ import annotations

import grpc
import pytest

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


@pytest.fixture
def arriving(monkeypatch):
    """The x-session-id values each call brings to the server (read where the server reads a
    call's metadata for its tenant)."""
    from budgeter.service.auth import Auth

    seen: list[list[str]] = []
    tenant = Auth.tenant

    def spy(self, context):
        seen.append([v for k, v in context.invocation_metadata() or () if k == HEADER])
        return tenant(self, context)

    monkeypatch.setattr(Auth, "tenant", spy)
    return seen


def test_a_client_on_its_own_channel_sends_the_header_once(server, arriving):
    """``Client(target)`` names the session in each call's metadata, once; a client given a
    channel sends what that channel adds (``affinity_channel``: the header, once)."""
    with Client(server.target) as c:
        s = c.create_session(session_id="own1")
        s.prompt(append=[{"role": "user", "content": "hi"}])
        c.tokenizers()
    assert arriving == [["own1"], ["own1"], []]
    arriving.clear()
    with Client(channel=grpc.insecure_channel(server.target)) as c:
        c.get_session("own1")
    with Client(channel=affinity_channel(server.target)) as c:
        c.get_session("own1")
    assert arriving == [[], ["own1"]]


def test_an_async_client_sends_the_header(server, arriving):
    import asyncio

    from budgeter.client import AsyncClient

    async def main():
        async with AsyncClient(server.target) as c:
            s = await c.create_session(session_id="async1")
            await s.prompt(append=[{"role": "user", "content": "hi"}])
            await c.tokenizers()

    asyncio.run(main())
    assert arriving == [["async1"], ["async1"], []]
