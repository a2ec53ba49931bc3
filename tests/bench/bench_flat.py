"""Cold and flat: start-up to ready per command, and whole-process CPU per turn by history size.

    python -m tests.bench.bench_flat [--sizes 10000 100000 1000000 2000000] [--turns 40]
                                     [--only ready serve shared layer]

- **ready**: wall time from the command's start to its answer or readiness, a fresh process
  each time (best and median of ``--repeat``): ``budgeter trim`` of a one-message file, the
  commands that count nothing (``validate`` of one call, ``plan-edits`` of one edit,
  ``tokenizers``, ``health`` of a serving server), ``budgeter serve`` to SERVING, ``budgeter
  proxy`` to ``/health``, and ``budgeter render`` with the Gemma 3 GGUF (its 262K-token
  vocabulary) when the package that holds it is installed. Each with a tokenizer cache
  (``BUDGETER_TOKENIZER_CACHE``, a temporary folder) that an earlier run filled ("later uses");
  trim and render also with an empty one each run ("first use", best and median of
  ``--cold-repeat``). A tree without the cache ignores the variable: both rows are its
  every-time cost.
- **serve**: a real ``budgeter serve`` per (store, size), default tokenizer, one-call turns
  (``prompt(append=..., since=previous)``) over the last ``--turns`` turns of a held-out session
  of each size, their turns interleaved. Per turn, the server process's CPU, every thread
  (``/proc/PID/task/*/schedstat``, nanoseconds), read around the call: p50 / p90, and the p50's
  ratio to the 100K session's; and the server's CPU for a ``GetSession`` of the same session, a
  call with no engine work (the gRPC server's own share of a turn).
- **shared**: as **serve**, but one ``budgeter serve`` per store holds the sessions of every size,
  as a replica serves its agents' sessions side by side: between two turns of a session the server
  runs the other sessions' turns, not three other processes (in **serve** each process's caches
  have gone cold by its next turn; the two layouts bound what a deployment sees).
- **layer**: the same turns of the same sessions through the session layer both front doors share,
  in this process, with no gRPC (``Sessions.append`` then ``Sessions.build``, as ``BuildPrompt``
  does them), on each store, after another held-out session of the same size warmed
  the process so that the counted turns tokenize their new messages: the calling thread's CPU per
  turn, p50 / p90 and the p50's ratio to the 100K session's. What ``serve`` adds to it is gRPC's.
- The proxy's growth with history (overhead and the proxy process's CPU per turn, 10K to 2M chars):
  ``python -m tests.bench.bench_proxy --growth``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from budgeter.client import Client
from tests.bench.bench_load import cpu_seconds, gauge
from tests.bench.bench_service import pct, turns
from tests.bench.peers import session
from tests.service.procs import ServerProcess

SERVE = ("--log-level", "warning")


def row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def serve_growth(sizes: list[int], k: int, *, shared: bool = False) -> None:
    bodies = {c: session(200 + i, c) for i, c in enumerate(sizes)}
    layout = "one server holding every size's session" if shared else "a server per size"
    print(f"\n### Through `budgeter serve` ({layout}): whole-process CPU per one-call turn, last {k} turns\n")
    print(row(["store", "history chars", "messages", "CPU p50", "CPU p90", "client p50", "p50 vs 100K",
               "GetSession CPU p50"]))
    print(row(["---"] * 8))
    for store in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            sides: dict[int, tuple[ServerProcess, Client]] = {}
            for c in sizes:
                if shared and sides:
                    sides[c] = next(iter(sides.values()))
                    continue
                where = ("--store", "memory://") if store == "memory" else ("--data-dir", f"{tmp}/{c}")
                server = ServerProcess(*where, *SERVE).start()
                stack.callback(server.stop)
                client = Client(server.target, timeout=600)
                stack.callback(client.close)
                sides[c] = (server, client)
            cpu, wall, floor = _interleave(sides, bodies, k)
        base = statistics.median(cpu[100_000]) if 100_000 in cpu else None
        for c in sizes:
            p50 = statistics.median(cpu[c])
            ratio = f"{p50 / base:.2f}x" if base else "-"
            print(row([store, f"{c:,}", len(bodies[c]["messages"]), f"{p50:.2f} ms", f"{pct(cpu[c], 0.9):.2f} ms",
                       f"{statistics.median(wall[c]):.2f} ms", ratio, f"{statistics.median(floor[c]):.2f} ms"]))


def _interleave(sides: dict[int, tuple[ServerProcess, Client]], bodies: dict[int, dict[str, Any]], k: int
                ) -> tuple[dict[int, list[float]], dict[int, list[float]], dict[int, list[float]]]:
    """Per size, each turn's server CPU and client wall time (ms), then the server CPU of ``k``
    ``GetSession`` calls of the same session: a call that does no engine work, the server's own
    cost of any call."""
    live = {}
    for c, (_, client) in sides.items():
        ts = list(turns(bodies[c]["messages"]))
        s = client.create_session(tools=bodies[c]["tools"])
        prompt = None
        n = min(k, len(ts) - 1)  # a small session has fewer turns: all but its first
        for t in ts[:-n]:
            prompt = s.prompt(append=t, since=prompt)
        live[c] = [s, prompt, ts[-n:]]
    cpu: dict[int, list[float]] = {c: [] for c in sides}
    wall: dict[int, list[float]] = {c: [] for c in sides}
    for i in range(k):
        for c, (server, _) in sides.items():
            s, prompt, rest = live[c]
            if i >= len(rest):
                continue
            pid = server.proc.pid  # type: ignore[union-attr]
            c0, t0 = cpu_seconds(pid), time.perf_counter()
            live[c][1] = s.prompt(append=rest[i], since=prompt)
            wall[c].append((time.perf_counter() - t0) * 1000)
            cpu[c].append((cpu_seconds(pid) - c0) * 1000)
    floor: dict[int, list[float]] = {c: [] for c in sides}
    for _ in range(k):
        for c, (server, client) in sides.items():
            pid = server.proc.pid  # type: ignore[union-attr]
            c0 = cpu_seconds(pid)
            client.get_session(live[c][0].id)
            floor[c].append((cpu_seconds(pid) - c0) * 1000)
    return cpu, wall, floor


def layer_growth(sizes: list[int], k: int) -> None:
    """Each store in a child process of its own, so that neither counts with words the other's
    sessions taught the tokenizer's piece counts."""
    print(f"\n### The session layer in process (no gRPC): CPU per one-call turn, last {k} turns\n")
    print(row(["store", "history chars", "CPU p50", "CPU p90", "p50 vs 100K"]))
    print(row(["---"] * 5))
    for store in ("memory", "sqlite"):
        out = subprocess.run([sys.executable, "-m", "tests.bench.bench_flat", "--layer-child", store, "--turns",
                              str(k), "--sizes", *map(str, sizes)], check=True, capture_output=True, text=True)
        cpu = {int(c): v for c, v in json.loads(out.stdout.splitlines()[-1]).items()}
        base = statistics.median(cpu[100_000]) if 100_000 in cpu else None
        for c in sizes:
            p50 = statistics.median(cpu[c])
            print(row([store, f"{c:,}", f"{p50:.2f} ms", f"{pct(cpu[c], 0.9):.2f} ms",
                       f"{p50 / base:.2f}x" if base else "-"]))


def layer_child(store: str, sizes: list[int], k: int) -> None:
    """Prints, as JSON on its last line, each size's CPU per counted turn (ms)."""
    from tests.bench.bench_service import one_call_turns, session_layer

    cpu: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sessions = session_layer("memory://" if store == "memory" else f"sqlite://{tmp}/layer.db")
        for i, c in enumerate(sizes):
            for seed in (300 + i, 200 + i):  # another session of the size first, then serve's
                steps = one_call_turns(sessions, session(seed, c))
                counted = cpu[c] = []
                first = len(steps) - min(k, len(steps) - 1)  # as serve counts them
                for n, turn in enumerate(steps):
                    t0 = time.thread_time()
                    turn()
                    if n >= first:
                        counted.append((time.thread_time() - t0) * 1000)
        sessions.store.close()
    print(json.dumps(cpu))


def ready(repeat: int, cold_repeat: int) -> None:
    """Each command with a tokenizer cache filled by a run before (later uses), and the commands
    that load a vocabulary also with an empty one each time (first use: it is built and written)."""
    from tests.bench.bench_proxy import free_port, start

    print(f"\n### Start-up to ready, a fresh process each time (best / median of {repeat}; "
          f"first use: of {cold_repeat})\n")
    print(row(["command", "cache", "best", "median"]))
    print(row(["---"] * 4))
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    up = start([sys.executable, "-m", "tests.proxy.upstream", str(up_port)], upstream + "/models")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(up.wait)
        stack.callback(up.terminate)
        stack.callback(os.environ.pop, "BUDGETER_TOKENIZER_CACHE", None)
        one = Path(tmp) / "one.json"
        one.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}]}))
        call = Path(tmp) / "call.json"
        call.write_text(json.dumps({"tool_call": {"function": {"name": "read_file", "arguments": '{"path": "a"}'}},
                                    "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {
                                        "type": "object", "properties": {"path": {"type": "string"}}}}}]}))
        edits = Path(tmp) / "edits.json"
        edits.write_text(json.dumps({"snapshot": "a\nb\n", "edits": [{"start_line": 2, "end_line": 2, "body": "c"}]}))
        probed = ServerProcess("--store", "memory://", *SERVE).start()  # what `budgeter health` asks
        stack.callback(probed.stop)
        counts_nothing: dict[str, Any] = {  # (they read no tokenizer cache)
            "`budgeter validate call.json`": lambda: _run(["validate", str(call)]),
            "`budgeter plan-edits edits.json`": lambda: _run(["plan-edits", str(edits)]),
            "`budgeter tokenizers`": lambda: _run(["tokenizers"]),
            "`budgeter health` (SERVING)": lambda: _run(["health", "--target", probed.target]),
        }
        cmds: dict[str, Any] = {
            "`budgeter trim one.json`": lambda: _run(["trim", str(one)]),
            **counts_nothing,
            "`budgeter serve` to SERVING": lambda: _until_serving(),
            "`budgeter proxy` to /health": lambda: _until_health(free_port(), upstream),
        }
        loads = {"`budgeter trim one.json`"}
        gguf = _gemma_gguf()
        if gguf is not None:
            name = f"`budgeter render --tokenizer {gguf.name}`"
            cmds[name] = lambda: _run(["render", str(one), "--tokenizer", str(gguf), "--chat-format", "gemma3"])
            loads.add(name)
        warm = Path(tmp) / "warm-cache"
        for name, fn in cmds.items():
            if name in loads:
                times = []
                for _ in range(cold_repeat):
                    os.environ["BUDGETER_TOKENIZER_CACHE"] = tempfile.mkdtemp(dir=tmp)
                    times.append(fn())
                print(row([name, "first use (empty)", f"{min(times):.2f} s", f"{statistics.median(times):.2f} s"]))
            os.environ["BUDGETER_TOKENIZER_CACHE"] = str(warm)
            fn()  # fills it
            times = [fn() for _ in range(repeat)]
            cache = "(none read)" if name in counts_nothing else "later uses"
            print(row([name, cache, f"{min(times):.2f} s", f"{statistics.median(times):.2f} s"]))


def _run(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "budgeter", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _until_serving() -> float:
    t0 = time.perf_counter()
    server = ServerProcess("--store", "memory://", *SERVE).start()
    took = time.perf_counter() - t0
    server.stop()
    return took


def _until_health(port: int, upstream: str) -> float:
    import httpx

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "budgeter", "proxy", "--upstream", upstream,
                             "--port", str(port), "--store", "memory://", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError("budgeter proxy exited")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return time.perf_counter() - t0
            time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait()


def _gemma_gguf() -> Path | None:
    from tests.proxy.gemma import gemma_model

    return gemma_model()[0]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 2_000_000])
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold-repeat", type=int, default=2, help="Runs with an empty tokenizer cache.")
    ap.add_argument("--only", nargs="+", choices=["ready", "serve", "shared", "layer"],
                    default=["ready", "serve", "shared", "layer"])
    ap.add_argument("--layer-child", choices=["memory", "sqlite"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.layer_child:
        return layer_child(a.layer_child, a.sizes, a.turns)
    print(" ".join(["    python -m tests.bench.bench_flat", *argv]))
    print(f"\nMachine: {os.cpu_count()} cores; sum(range(10**7)) in {gauge():.3f} s before the run.")
    if "ready" in a.only:
        ready(a.repeat, a.cold_repeat)
    if "serve" in a.only:
        serve_growth(a.sizes, a.turns)
    if "shared" in a.only:
        serve_growth(a.sizes, a.turns, shared=True)
    if "layer" in a.only:
        layer_growth(a.sizes, a.turns)


if __name__ == "__main__":
    main()
