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


def test_a_link_a_failed_write_left_is_written_with_the_next_digest(private_redis):
    """Redis is demoted to a read-only replica (as in a failover) for eight turns in a row while
    history is dropped: each build reads the session and compacts it, but cannot store what it
    elided, and no build is retried. Each digest those builds make extends one only a failed
    build made, whose link the store never took; those links are written by the next build that
    succeeds, so its digest's payload still puts itself back together."""
    import redis

    from budgeter.core.markers import handle_for
    from tests.bench.sessions import TOOLS
    from tests.redis_server import free_port
    from tests.service.test_api import turns

    admin = redis.Redis.from_url(private_redis.url)
    srv = create_server(settings(store=private_redis.url))
    try:
        with Client(srv.target, retries=0) as c:
            s = c.create_session(tools=TOOLS, window=6000, reserve=500)
            failed, checked = 0, set()
            for i, t in enumerate(turns(48)):
                s.append(t)
                if i // 8 % 2:
                    admin.replicaof("127.0.0.1", free_port())  # no primary there: keeps its data, read-only
                    try:
                        s.prompt()
                    except ClientError as e:
                        assert (e.code, e.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
                        failed += 1
                    finally:
                        admin.replicaof("NO", "ONE")
                    continue
                for h in s.prompt().report.get("handles", ()):
                    assert handle_for(s.payload(h)) == h
                    checked.add(h)
            assert failed >= 8
            assert sum(s.payload(h).startswith("[{") for h in checked) >= 3  # digests among them
    finally:
        admin.close()
        srv.stop(0)
