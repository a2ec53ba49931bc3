"""``durability=aof`` (WAITAOF) on a real primary with a real replica, both ``appendonly yes``
(``appendfsync always``), on a server that has WAITAOF: Redis >= 7.2 or Valkey, found by
``tests.redis_server.redis_binary(at_least=WAITAOF)`` (``$BUDGETER_REDIS_SERVER``, the cache that
``.ci/fetch-valkey-server`` fills); skipped, with where to get one, where there is none.
- an acknowledged append is in both nodes' append-only files: it survives the primary's SIGKILL and
  the replica's promotion, and each node restarted from its own AOF alone still has it;
- with the replica stopped (SIGSTOP) an append through ``budgeter serve`` is refused (UNAVAILABLE,
  STORE_UNAVAILABLE), and once the replica is back the retry with the same request_id is answered as
  a replay: stored once;
- on a server without WAITAOF, ``budgeter serve`` with ``durability=aof`` does not start, and says
  why. (``test_redis_durability`` checks the same refusal in the store.)
Every wait is for a state (a role, a process state, a replication offset); the timeouts are only
safety nets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
import redis

from budgeter.client import Client, ClientError
from budgeter.store import SessionRecord
from budgeter.store.redis import RedisStore
from tests.redis_server import WAITAOF, RedisServer, redis_binary, server_version, waitaof_missing
from tests.service.procs import ServerProcess, environ
from tests.service.test_startup import one_line_error

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 300.0) -> T:
    """``condition()``'s first true value; a Redis or connection error counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = condition()
        except (redis.RedisError, OSError):
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def pid(server: RedisServer) -> int:
    assert server.proc is not None
    return server.proc.pid


def stopped(server: RedisServer) -> bool:
    """The process is stopped (SIGSTOP has taken effect): state ``T`` in /proc."""
    return Path(f"/proc/{pid(server)}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def caught_up(primary: RedisServer) -> bool:
    """The primary's one replica is online and has acknowledged everything the primary wrote."""
    with redis.Redis(port=primary.port) as r:
        info = r.info("replication")
    link = info.get("slave0")
    return bool(link) and link["state"] == "online" and int(link["offset"]) >= int(info["master_repl_offset"])


@pytest.fixture
def aof_pair():
    """A primary and its replica, both with AOF (fsync always), on a server with WAITAOF."""
    binary = redis_binary(at_least=WAITAOF)
    if binary is None:
        pytest.skip(waitaof_missing())
    primary = RedisServer(binary, aof=True, extra=["--repl-diskless-sync-delay", "0"]).start()  # sync at once
    replica = RedisServer(binary, aof=True, extra=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    wait_for(lambda: caught_up(primary), "the replication link")
    yield primary, replica
    for server in (replica, primary):
        if server.proc is not None:
            os.kill(server.proc.pid, signal.SIGCONT)
        server.cleanup()


def records(server: RedisServer, store: RedisStore, sid: str) -> list[bytes]:
    with redis.Redis(port=server.port) as r:
        return list(r.lrange(store.keys(sid)["msgs"], 0, -1))


def test_acknowledged_appends_survive_the_primary_killed_and_are_on_both_nodes_disks(aof_pair):
    primary, replica = aof_pair
    store = RedisStore.from_url(primary.url, durability="aof", durability_timeout=3)
    assert store.durability == "aof"
    rec = SessionRecord("s", uuid.uuid4().hex, "{}", time.time())
    store.create(rec)
    acked = []
    for i in range(20):
        store.append("s", [f"m{i}"], incarnation=rec.incarnation, request_id=f"r{i}", fingerprint="f", result="r")
        acked.append(f"m{i}".encode())
    primary.kill()  # SIGKILL right after the last acknowledgement
    with redis.Redis(port=replica.port) as r:
        r.replicaof("NO", "ONE")
        wait_for(lambda: r.execute_command("ROLE")[0] == b"master", "the replica's promotion")
    assert records(replica, store, "s") == acked
    replica.kill()  # and each node, restarted alone, has them in its own AOF
    replica.extra = []
    for server in (replica, primary):
        server.start()
        assert records(server, store, "s") == acked, server.port
    store.close()


def test_an_append_refused_while_the_replica_is_stopped_is_stored_once_by_its_retry(aof_pair):
    primary, replica = aof_pair
    # 3 s, not 1: now and then a WAITAOF for a replica waits ~1 s even with the replica up (OPERATIONS.md)
    env = {"BUDGETER_DURABILITY": "aof", "BUDGETER_DURABILITY_TIMEOUT": "3"}
    server = ServerProcess("--store", primary.url, env=env).start()
    try:
        with Client(server.target, timeout=60, retries=0) as client:
            sid = client.create_session(window=8192).id
            client.append(sid, [{"role": "user", "content": "before"}], request_id="r1")
            os.kill(pid(replica), signal.SIGSTOP)
            wait_for(lambda: stopped(replica), "the replica stopped")
            with pytest.raises(ClientError) as err:
                client.append(sid, [{"role": "user", "content": "during"}], request_id="r2")
            assert (err.value.code, err.value.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
            assert err.value.metadata["durability"] == "aof" and err.value.metadata["replicas"] == "0"
            os.kill(pid(replica), signal.SIGCONT)
            wait_for(lambda: caught_up(primary), "the replica caught up")
            again = wait_for(lambda: retry(client, sid), "the retry acknowledged")
            assert again["replayed"] and again["message_count"] == 2
            assert [m["content"] for m in client.prompt(sid).messages] == ["before", "during"]
        with redis.Redis(port=replica.port) as r:
            assert len(r.lrange(f"budgeter:{{{sid}}}:msgs", 0, -1)) == 2  # on the replica, once
    finally:
        server.stop()


def retry(client: Client, sid: str) -> dict | None:
    """The refused append again, same request_id; None while it is still refused."""
    try:
        return client.append(sid, [{"role": "user", "content": "during"}], request_id="r2")
    except ClientError as exc:
        assert exc.reason == "STORE_UNAVAILABLE", exc
        return None


def test_serve_with_aof_durability_on_a_server_without_waitaof_does_not_start(private_redis):
    if server_version(private_redis.binary) >= WAITAOF:
        pytest.skip(f"{private_redis.binary} has WAITAOF: nothing to refuse")
    out = subprocess.run([sys.executable, "-m", "budgeter", "serve", "--store", private_redis.url, "--port", "0",
                          "--metrics-port", "0"], env=environ({"BUDGETER_DURABILITY": "aof"}),
                         capture_output=True, text=True, timeout=300)
    line = one_line_error(out)
    version = ".".join(map(str, server_version(private_redis.binary)))
    assert line.startswith("budgeter: INVALID_INPUT: durability 'aof' needs WAITAOF (Redis >= 7.2)"), line
    assert f"runs Redis {version}" in line and "use 'replica'" in line
