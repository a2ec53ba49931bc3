"""A Redis outage gives UNAVAILABLE with reason STORE_UNAVAILABLE; service recovers by itself."""

from __future__ import annotations

import grpc
import pytest

from budgeter.client import Client, ClientError
from budgeter.service.server import create_server
from tests.service.conftest import settings


def test_redis_outage_and_recovery(private_redis):
    srv = create_server(settings(store=private_redis.url))
    try:
        with Client(srv.target) as c:
            s = c.create_session(session_id="x")
            s.append([{"role": "user", "content": "before"}])
            private_redis.stop()
            for call in (lambda: s.append([{"role": "user", "content": "during"}]),
                         lambda: c.get_session("x"), lambda: s.prompt()):
                with pytest.raises(ClientError) as e:
                    call()
                assert (e.value.code, e.value.reason) == (grpc.StatusCode.UNAVAILABLE,
                                                          "STORE_UNAVAILABLE")
            private_redis.start()  # empty again (no persistence); the service reconnects itself
            s2 = c.create_session(session_id="x")
            s2.append([{"role": "user", "content": "after"}])
            assert [m["content"] for m in s2.prompt().messages] == ["after"]
    finally:
        srv.stop(0)
