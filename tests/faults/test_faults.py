"""Faults with real processes: Redis restarted mid-load (AOF), a replica killed with SIGKILL,
SIGTERM draining, a slow Redis against client deadlines, SQLite killed mid-write. Each test stops
by itself and prints what it counted."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter

import grpc

from budgeter.client import Client, ClientError
from budgeter.service.server import create_server
from tests.redis_server import free_port
from tests.service.conftest import settings
from tests.service.procs import ServerProcess


def batch(w: int, i: int) -> list[dict]:
    return [{"role": "user", "content": f"w{w} m{i} a"}, {"role": "assistant", "content": f"w{w} m{i} b"}]


def append_until_acked(clients, sid, w, i, codes: Counter, deadline: float) -> None:
    """Retry with the same request_id, on any replica, until acknowledged."""
    attempt = 0
    while time.monotonic() < deadline:
        client = clients[(w + attempt) % len(clients)]
        try:
            client.append(sid, batch(w, i), request_id=f"w{w}-{i}")
            return
        except ClientError as err:
            codes[err.code.name] += 1
            attempt += 1
            time.sleep(0.05)
    raise AssertionError(f"append w{w}-{i} never acknowledged")


class Progress:
    """Acknowledged appends, counted as the writers make them: a fault is injected once the load
    has reached a given point, whatever the machine's speed (a fixed sleep either found the load
    finished on a fast machine or not yet started on a busy one)."""

    def __init__(self) -> None:
        self.done = 0
        self._cond = threading.Condition()

    def acked(self) -> None:
        with self._cond:
            self.done += 1
            self._cond.notify_all()

    def wait(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.done >= n, timeout=600), self.done


def check_history(messages: list[dict], writers: int, per: int) -> None:
    contents = [m["content"] for m in messages]
    assert len(contents) == len(set(contents)) == writers * per * 2, "lost or duplicated appends"
    for w in range(writers):
        assert [c for c in contents if c.startswith(f"w{w} ")] == [
            f"w{w} m{i} {x}" for i in range(per) for x in "ab"], "a writer's order changed"
    for k in range(0, len(contents), 2):
        assert contents[k][:-2] == contents[k + 1][:-2], "an append was split"


def test_redis_restarted_mid_load_loses_no_acknowledged_append(aof_redis):
    srv = create_server(settings(store=aof_redis.url, max_workers=8))
    writers, per, codes, progress = 4, 120, Counter(), Progress()
    try:
        clients = [Client(srv.target, timeout=5, retries=0) for _ in range(writers)]
        sid = clients[0].create_session(session_id="load", window=200_000).id

        def write(w: int) -> None:
            for i in range(per):
                append_until_acked([clients[w]], sid, w, i, codes, time.monotonic() + 600)
                progress.acked()
                time.sleep(0.01)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        progress.wait(writers * per // 8)
        aof_redis.kill()  # SIGKILL mid-load
        time.sleep(1.0)
        aof_redis.start()  # same port and directory: AOF replays
        for t in threads:
            t.join()
        check_history(clients[0].prompt(sid).messages, writers, per)
        print(f"\nredis restart: errors seen during the outage {dict(codes)}")
        assert set(codes) <= {"UNAVAILABLE"}, codes  # never UNKNOWN, INTERNAL or a hang
        assert codes["UNAVAILABLE"] > 0
        for c in clients:
            c.close()
    finally:
        srv.stop(0)


def test_replica_killed_mid_load_retries_elsewhere_without_duplicates(redis_url):
    a = ServerProcess("--store", redis_url).start()
    b = ServerProcess("--store", redis_url).start()
    writers, per, codes, progress = 4, 200, Counter(), Progress()
    try:
        ca, cb = Client(a.target, timeout=3, retries=0), Client(b.target, timeout=3, retries=0)
        sid = ca.create_session(session_id="kill", window=200_000).id

        def write(w: int) -> None:
            for i in range(per):
                append_until_acked([ca, cb], sid, w, i, codes, time.monotonic() + 600)
                progress.acked()

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        progress.wait(writers * per // 8)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        a.proc.stdout.close()
        a.proc = None
        for t in threads:
            t.join()
        check_history(cb.prompt(sid).messages, writers, per)
        print(f"\nreplica SIGKILL: errors seen {dict(codes)}")
        assert set(codes) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"}, codes
        assert codes, "the replica was killed after the load had finished"
        ca.close()
        cb.close()
    finally:
        a.stop()
        b.stop()


def test_sigterm_drains_in_flight_calls_and_reports_not_serving(tmp_path):
    """A call in flight when SIGTERM comes (seen in the server's own in-flight gauge) finishes;
    health turns NOT_SERVING meanwhile; the process then exits cleanly. (The grace is long: this
    checks the drain, not how long a busy machine takes to count 20 MB.)"""
    import httpx
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    metrics = free_port()
    server = ServerProcess("--data-dir", str(tmp_path), "--metrics-port", str(metrics),
                           env={"BUDGETER_GRACE": "600"}).start()
    client = Client(server.target, timeout=600)
    big = "word " * 4_000_000  # about 20 MB: a count that takes a while
    outcome: dict = {}

    def slow_call() -> None:
        try:
            outcome["tokens"] = client.count_tokens(text=big)
        except ClientError as err:
            outcome["error"] = err.code

    worker = threading.Thread(target=slow_call)
    worker.start()
    flying = 'budgeter_rpcs_in_flight{method="CountTokens"} 1.0'
    while flying not in httpx.get(f"http://127.0.0.1:{metrics}/metrics").text:
        assert worker.is_alive(), outcome  # (it finished before it was seen: the count was too quick)
        time.sleep(0.01)
    server.proc.send_signal(signal.SIGTERM)
    seen = []
    with grpc.insecure_channel(server.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while health_pb2.HealthCheckResponse.NOT_SERVING not in seen and server.proc.poll() is None:
            try:
                seen.append(stub.Check(health_pb2.HealthCheckRequest(), timeout=600).status)
            except grpc.RpcError as err:
                seen.append(err.code().name)
                break
            time.sleep(0.02)
    worker.join()
    try:
        output, _ = server.proc.communicate(timeout=600)  # drains the pipe while waiting for the exit
    except subprocess.TimeoutExpired:
        server.proc.send_signal(signal.SIGUSR1)  # dump every thread's stack, then fail
        time.sleep(1)
        server.proc.kill()
        output, _ = server.proc.communicate()
        raise AssertionError(output.decode(errors="replace")[-5000:]) from None
    server.proc = None
    assert b"budgeter: stopped" in output, output[-2000:]
    assert outcome.get("tokens", 0) > 1_000_000, outcome  # the in-flight call finished
    assert health_pb2.HealthCheckResponse.NOT_SERVING in seen, seen
    client.close()


def test_slow_redis_gives_deadline_exceeded_not_a_pile_up(aof_redis):
    srv = create_server(settings(store=aof_redis.url, max_workers=4))
    try:
        with Client(srv.target, timeout=0.5, retries=0) as c:
            s = c.create_session(session_id="slow")
            s.append([{"role": "user", "content": "before"}])
            aof_redis.proc.send_signal(signal.SIGSTOP)  # Redis hangs: connections open, no answers
            codes = Counter()
            while codes["DEADLINE_EXCEEDED"] < 4 and sum(codes.values()) < 40:  # each ends at its deadline
                try:
                    s.prompt()
                    codes["OK"] += 1
                except ClientError as err:
                    codes[err.code.name] += 1
            aof_redis.proc.send_signal(signal.SIGCONT)
            with Client(srv.target, timeout=600, retries=0) as patient:  # the calls abandoned meanwhile
                assert [m["content"] for m in patient.session("slow").prompt().messages] == ["before"]
            print(f"\nslow redis: {dict(codes)}")
            assert set(codes) <= {"DEADLINE_EXCEEDED"}, codes
    finally:
        srv.stop(0)


WRITER = """
import sys, time, uuid
from budgeter.store import open_store
from budgeter.store.base import SessionRecord
store = open_store(sys.argv[1])
recs = []
for k in range(4):
    r = SessionRecord(f"s{k}", uuid.uuid4().hex, "{}", time.time())
    store.create(r)
    recs.append(r)
print("ready", flush=True)
i = 0
while True:
    r = recs[i % 4]
    store.append(r.id, [f"{i}:a", f"{i}:b", f"{i}:c" * 500], incarnation=r.incarnation,
                 request_id=f"r{i}", fingerprint="f", result="x")
    i += 1
"""


def test_sqlite_killed_mid_write_opens_clean_without_partial_appends(tmp_path):
    path = tmp_path / "kill.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, f"sqlite://{path}"], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    total = 0
    for sid, version in db.execute("SELECT id, version FROM sessions"):
        idx = [r[0] for r in db.execute("SELECT idx FROM messages WHERE session_id = ? ORDER BY idx", (sid,))]
        assert idx == list(range(version)) and version % 3 == 0, (sid, version, len(idx))
        total += version
    db.close()
    from budgeter.store import open_store

    store = open_store(f"sqlite://{path}")
    assert store.read("s0")[0].version == store.read("s0")[0].version  # opens and reads
    store.close()
    print(f"\nsqlite SIGKILL: {total} messages in whole appends, integrity ok")
    assert total > 0
