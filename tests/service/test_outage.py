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


def test_payloads_a_failed_write_left_are_written_by_the_next_build(private_redis):
    """Redis refuses writes (out of memory) while builds compact: a build that cannot store what
    it elided fails, and every handle in a later prompt still resolves to its payload, digests
    made of links among them."""
    import json

    import redis

    from budgeter.core.markers import handle_for
    from tests.bench.sessions import TOOLS
    from tests.service.test_api import turns

    admin = redis.Redis.from_url(private_redis.url)
    srv = create_server(settings(store=private_redis.url))
    try:
        with Client(srv.target, retries=0) as c:
            s = c.create_session(tools=TOOLS, window=6000, reserve=500)
            failed, handles = 0, set()
            for t in turns(40):
                s.append(t)
                admin.config_set("maxmemory", 1)  # reads still work, writes do not
                try:
                    s.prompt()
                except ClientError as e:
                    assert (e.code, e.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
                    failed += 1
                finally:
                    admin.config_set("maxmemory", 0)
                p = s.prompt()
                handles.update(p.report.get("handles", ()))
                for h in p.report.get("handles", ()):
                    assert handle_for(s.payload(h)) == h
            assert failed >= 3
            digests = [h for h in handles if s.payload(h).startswith("[{")]
            assert len(digests) >= 3
            assert all(isinstance(json.loads(s.payload(h)), list) for h in digests)
    finally:
        admin.close()
        srv.stop(0)
