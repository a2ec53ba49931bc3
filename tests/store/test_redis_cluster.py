"""A real 3-master Redis Cluster (redis-server in cluster mode, redis-cli --cluster create):
sessions run through it with no CROSSSLOT error and no lost append."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from budgeter.store import SessionRecord, open_store
from tests.redis_server import redis_binary


def cluster_ports(n: int) -> list[int]:
    """Ports p whose cluster bus port p + 10000 is free too (and below 65536)."""
    import random
    import socket

    out: list[int] = []
    while len(out) < n:
        p = random.randint(20000, 29999)
        try:
            for port in (p, p + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        if p not in out:
            out.append(p)
    return out


@pytest.fixture(scope="module")
def cluster():
    server = redis_binary()
    cli = shutil.which("redis-cli") or (str(Path(server).with_name("redis-cli")) if server else None)
    if not server or not cli or not Path(cli).exists():
        pytest.skip("needs redis-server and redis-cli")
    base = Path(tempfile.mkdtemp(prefix="budgeter-cluster-"))
    ports = cluster_ports(3)
    procs = []
    for port in ports:
        d = base / str(port)
        d.mkdir()
        procs.append(subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--dir", str(d), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port in ports:
            for _ in range(100):
                if subprocess.run([cli, "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                    break
                time.sleep(0.05)
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True,
                       timeout=60)
        for _ in range(100):
            info = subprocess.run([cli, "-p", str(ports[0]), "cluster", "info"], capture_output=True).stdout
            if b"cluster_state:ok" in info:
                break
            time.sleep(0.1)
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def test_sessions_through_a_cluster(cluster):
    store = open_store(cluster)
    records = []
    for k in range(12):  # ids hash to all three masters
        rec = SessionRecord(f"agent-{k}", uuid.uuid4().hex, "{}", time.time(), 60.0, time.time() + 60)
        store.create(rec)
        records.append(rec)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for i in range(25):
                rec = records[(w + i) % len(records)]
                store.append(rec.id, [f"{w}:{i}:a", f"{w}:{i}:b"], incarnation=rec.incarnation,
                             request_id=f"{w}-{i}", fingerprint="f", result="r")
                store.append(rec.id, [f"{w}:{i}:a", f"{w}:{i}:b"], incarnation=rec.incarnation,
                             request_id=f"{w}-{i}", fingerprint="f", result="r")  # a retry
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors  # a CROSSSLOT error would surface here
    total = 0
    for rec in records:
        got, items = store.read(rec.id)
        assert got.version == len(items) and len(set(items)) == len(items)
        total += len(items)
        store.put_payloads(rec.id, {"h": "payload"})
        store.add_event(rec.id, "{}")
        assert store.get_payload(rec.id, "h") == "payload" and store.events(rec.id) == ["{}"]
    assert total == 4 * 25 * 2
    assert [r.id for r in store.list_page(after="", limit=100)] == sorted(r.id for r in records)
    assert store.count() == 12
    store.delete("agent-0")
    assert store.count() == 11
    store.close()
