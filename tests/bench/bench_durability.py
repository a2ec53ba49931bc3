"""What a durable acknowledgement costs an append: a real primary with a real replica
(``--replicaof``, both on this machine), the Redis store appending one ~2 KB record at a time to
one session, at durability ``primary`` (no wait) and ``replica`` (WAIT 1 after the script), and
``aof`` (WAITAOF, primary and replica with appendfsync always) where the server has it (>= 7.2).

    python -m tests.bench.bench_durability [--rounds 3] [--appends 2000] [--aof]

``--aof``: both servers run with ``appendonly yes``, ``appendfsync always`` (an fsync per write), on a
server with WAITAOF where one is found (``tests.redis_server.redis_binary(at_least=WAITAOF)``:
``$BUDGETER_REDIS_SERVER``, ``.ci/fetch-valkey-server``'s cache), and every level on that one.

The levels alternate within each round, so a change of the machine's speed falls on all of them.
Printed per level: median and 99th percentile of an append's wall time, in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import redis

from budgeter.store import SessionRecord
from budgeter.store.redis import RedisStore
from budgeter.store.redis_ha import redis_version
from tests.redis_server import WAITAOF, RedisServer, redis_binary

RECORD = '{"m": {"role": "tool", "content": "' + "x" * 2000 + '"}, "t": "", "n": 500, "p": []}'


def appends(store: RedisStore, n: int) -> list[float]:
    rec = SessionRecord(uuid.uuid4().hex, uuid.uuid4().hex, "{}", time.time())
    store.create(rec)
    out = []
    for i in range(n):
        t = time.perf_counter()
        store.append(rec.id, [RECORD], incarnation=rec.incarnation, request_id=f"r{i}", fingerprint="f", result="")
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--aof", action="store_true")
    args = ap.parse_args()
    binary = (args.aof and redis_binary(at_least=WAITAOF)) or redis_binary()
    assert binary, "needs redis-server"
    primary = RedisServer(binary, aof=args.aof, extra=["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(binary, aof=args.aof, extra=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    try:
        with redis.Redis(port=replica.port) as probe:
            while probe.info("replication")["master_link_status"] != "up":
                time.sleep(0.05)
        levels = ["primary", "replica"]
        with redis.Redis(port=primary.port) as probe:
            version = redis_version(probe)
        if version >= (7, 2) and args.aof:
            levels.append("aof")
        # 3 s: a WAITAOF for a replica now and then waits ~1 s (OPERATIONS.md), which the default 1 s refuses
        stores = {lv: RedisStore.from_url(primary.url, durability=lv, durability_timeout=3) for lv in levels}
        times: dict[str, list[float]] = {lv: [] for lv in levels}
        for _ in range(args.rounds):
            for lv in levels:
                times[lv] += appends(stores[lv], args.appends)
        print(f"{binary}: redis_version {'.'.join(map(str, version))}, primary and replica on this machine, "
              f"{'AOF fsync always' if args.aof else 'no AOF'}, "
              f"{args.rounds} x {args.appends} appends of one {len(RECORD)}-byte record")
        print(f"{'durability':<12}{'median us':>12}{'p99 us':>12}")
        for lv in levels:
            q = statistics.quantiles(times[lv], n=100)
            print(f"{lv:<12}{statistics.median(times[lv]) * 1e6:>12.0f}{q[98] * 1e6:>12.0f}")
        if "aof" not in levels:
            print("aof: not measured (needs --aof and Redis >= 7.2 for WAITAOF; this is "
                  f"{'.'.join(map(str, version))})")
        for store in stores.values():
            store.close()
    finally:
        replica.cleanup()
        primary.cleanup()


if __name__ == "__main__":
    main()
