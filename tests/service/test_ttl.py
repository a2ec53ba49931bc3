"""A session's TTL has a bound: one whose expiry has no timestamp broke every read and listing."""

from __future__ import annotations

import pytest

from budgeter.client import ClientError
from budgeter.service.sessions import MAX_TTL


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
