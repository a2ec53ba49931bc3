"""A replica's memory with long sessions, with and without the byte bound on its cache.

    python -m tests.bench.bench_memory [--sessions 6] [--chars 2000000] [--live-bytes 64MiB]
    python -m tests.bench.bench_memory --calibrate [--chars 2000000]

Each run is a fresh process holding the same session layer as ``budgeter serve`` (``Sessions``
over a SQLite store in a temporary directory, so the store's copy of history is on disk, not in
the process). It plays ``--sessions`` coding sessions of ``--chars`` characters one after the
other (``tests/bench/sessions.py``), each turn an append of the model's message with its tool
results followed by a build, every message parsed from its JSON as a server does, then comes back
to each session once more (an append and a build: a session evicted is read from the store
again). It prints the RSS after the profile loaded, after each session, its peak, and what the
cache accounts for (``Replica.used``).

``--calibrate`` measures with tracemalloc what a session's engine state holds: the memory freed
when the session is evicted and the process-wide memos keyed by its messages are cleared (they
turn over as other sessions are served); the piece-count caches, bounded on their own and shared
by every session, are left out. Two sessions give the two figures of
``sessions/replica.py``'s ``footprint``: the coding session, and a chat of short messages.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from typing import Any

from budgeter.core.messages import Message, from_openai_list
from tests.bench.bench_engine import turns as engine_turns
from tests.bench.sessions import make_session

PROFILE = "qwen3.6"


def rss_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def turns(messages: list[dict[str, Any]]) -> Iterator[list[Message]]:
    """The session as a client sends it, parsed from JSON text (no string shared with the body it
    came from), a turn at a time (``bench_engine.turns``)."""
    return engine_turns(from_openai_list(json.loads(json.dumps(messages))))


def chat(chars: int) -> dict[str, Any]:
    """A session of short user and assistant messages (~200 characters each)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    n = 0
    while n < chars:
        role = "user" if len(out) % 2 else "assistant"
        text = f"{role} turn {len(out)}: " + " ".join(f"word{(len(out) * 7 + k) % 997}" for k in range(24))
        out.append({"role": role, "content": text})
        n += len(json.dumps(out[-1]))
    return {"messages": out, "tools": []}


def sessions_layer(directory: str, live_bytes: int) -> Any:
    from budgeter.sessions.sessions import Limits, Sessions
    from budgeter.sessions.tokenizers import Tokenizers
    from budgeter.store import open_store

    tokenizers = Tokenizers({}, default=PROFILE)
    tokenizers.counter(PROFILE)
    store = open_store(f"sqlite://{directory}/bench.db")
    return Sessions(store, tokenizers, limits=Limits(live_bytes=live_bytes))


def play(sessions: Any, body: dict[str, Any]) -> tuple[str, int, int]:
    """(session id, messages, history characters)."""
    info = sessions.create(tools=body["tools"])
    for messages in turns(body["messages"]):
        sessions.append(info.id, messages)
        if messages[-1].role != "user":
            sessions.build(info.id)
    return info.id, len(body["messages"]), sum(len(json.dumps(m)) for m in body["messages"])


def one_run(n: int, chars: int, live_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        sessions = sessions_layer(directory, live_bytes)
        start = rss_mb()
        print(f"  profile loaded: {start:.0f} MB RSS")
        ids = []
        for k in range(n):
            sid, msgs, got = play(sessions, make_session(k, chars=chars))
            ids.append(sid)
            print(f"  session {k}: {msgs} messages, {got / 1e6:.2f}M chars; RSS {rss_mb():.0f} MB, "
                  f"cache {len(sessions.replica)} sessions, {sessions.replica.used / 2**20:.0f} MiB accounted; "
                  f"{memos_held()}")
        for sid in ids:  # each once more: evicted ones are read from the store again
            sessions.append(sid, [Message("user", "One more thing: run the tests again.")])
            sessions.build(sid)
        gc.collect()
        print(f"  after a turn of each again: RSS {rss_mb():.0f} MB, cache {len(sessions.replica)} sessions, "
              f"{sessions.replica.used / 2**20:.0f} MiB accounted, {memos_held()}; peak RSS {rss_mb('VmHWM'):.0f} MB "
              f"({(rss_mb('VmHWM') - start) / (n * chars / 1e6):.1f} MB per million characters over the start)")


def memos_held() -> str:
    """What the process-wide memos hold against their budget (``core/memo.py``)."""
    from budgeter.core import memo

    held = list(memo.bounded())
    return (f"memos {sum(m.chars for m in held) / 1e6:.1f}M chars held, {len(held)} of "
            f"{memo.budget() / 1e6:.1f}M each")


def clear_message_memos(sessions: Any) -> None:
    """Empty the process-wide memos that hold messages, or text and objects made from them; each
    is bounded on its own (``core/memo.py``) and turns over as other sessions are served. The
    piece-count cache (``PieceCounter._cache``) is left as it is."""
    from budgeter.core import memo

    pieces = sessions.tokenizers.counter(PROFILE).pieces._cache
    for held in memo.bounded():
        if held is not pieces:
            held.clear()


def calibrate(chars: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        sessions = sessions_layer(directory, 1 << 62)
        play(sessions, chat(20_000))  # the template's and counters' one-off state, out of the figures
        clear_message_memos(sessions)
        for label, body in (("coding", make_session(0, chars=chars)), ("chat", chat(chars // 4))):
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            sid, msgs, _ = play(sessions, body)
            gc.collect()
            built = tracemalloc.get_traced_memory()[0]
            live = sessions.replica.cached(sid)
            sessions.replica.forget(sid)
            del live
            clear_message_memos(sessions)
            gc.collect()
            freed = built - tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            from budgeter.sessions.replica import footprint
            text = sum(len(m.content) + len(m.reasoning or "") + sum(len(c.name) + len(c.arguments)
                                                                     for c in m.tool_calls)
                       for ms in turns(body["messages"]) for m in ms)
            estimate = footprint([m for ms in turns(body["messages"]) for m in ms])
            print(f"  {label}: {msgs} messages, {text:,} text characters: {(built - before) / 1e6:.1f} MB "
                  f"traced after the builds, {freed / 1e6:.1f} MB freed by eviction "
                  f"({freed / text:.2f} bytes a character, {freed / msgs:,.0f} bytes a message); "
                  f"footprint estimates {estimate / 1e6:.1f} MB")


def size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "": 1}
    low = text.lower()
    for unit, factor in units.items():
        if unit and low.endswith(unit):
            return int(float(low[: -len(unit)]) * factor)
    return int(low) * units[""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--chars", type=int, default=2_000_000)
    ap.add_argument("--live-bytes", default="64MiB", help="the bound of the bounded run")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.calibrate:
        calibrate(args.chars)
        return
    if args.one:
        one_run(args.sessions, args.chars, size(args.one))
        return
    for label, bound in (("no byte bound", str(1 << 62)), (f"live_bytes={args.live_bytes}", args.live_bytes)):
        print(f"{args.sessions} sessions of {args.chars:,} characters, {label}:", flush=True)
        subprocess.run([sys.executable, "-m", "tests.bench.bench_memory", "--sessions", str(args.sessions),
                        "--chars", str(args.chars), "--one", bound], check=True, env=os.environ)


if __name__ == "__main__":
    main()
