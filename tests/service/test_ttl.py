"""A session's TTL has a bound: one whose expiry has no timestamp broke every read and listing."""

from __future__ import annotations

import pytest

from budgeter.client import ClientError
from budgeter.sessions.sessions import MAX_TTL


@pytest.mark.parametrize("ttl", [MAX_TTL + 1, 250_000 * 365 * 86_400.0])
def test_a_ttl_past_the_bound_is_refused_naming_the_field(client, ttl):
    with pytest.raises(ClientError) as e:
        client.create_session(ttl=ttl)
    assert e.value.reason == "INVALID_INPUT" and "ttl" in str(e.value)
    assert client.list_sessions() == []  # nothing was stored


def test_the_longest_ttl_is_stored_and_read_back(client):
    s = client.create_session(ttl=MAX_TTL)
    assert client.get_session(s.id)["ttl"]
    assert client.list_sessions() == [s.id]


def test_a_session_stored_with_an_expiry_past_year_9999_can_still_be_read_and_listed():
    """As one stored before TTLs had a bound: its expiry reads back as the last Timestamp."""
    from budgeter.client import Client
    from budgeter.service.server import create_server
    from budgeter.store.base import SessionRecord
    from budgeter.store.memory import MemoryStore
    from tests.service.conftest import settings

    config = MemoryStore()
    made = create_server(settings(), store=config)
    try:
        with Client(made.target, timeout=30) as c:
            c.create_session(session_id="old")
    finally:
        made.stop(0)
    record = config.get("old")
    store = MemoryStore()
    store.create(SessionRecord("old", record.incarnation, record.config, 0.0, 1e12, 1e12))
    server = create_server(settings(), store=store)
    try:
        with Client(server.target, timeout=30) as c:
            assert c.list_sessions() == ["old"]
            assert c.get_session("old")["expire_time"].startswith("9999-12-31")
    finally:
        server.stop(0)
