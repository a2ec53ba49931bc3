"""One-call turns through the session layer alone, in one thread: what a replica's engine spends
per turn, without gRPC or a client in the same process. Made to be sampled by a profiler:

    python -m tests.bench.bench_turns [--profile qwen3.6] [--repeat 4] [--cold 64]
    py-spy record -f raw -o turns.txt -- python -m tests.bench.bench_turns --repeat 12
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
        python -m tests.bench.bench_turns --profile gemma3 --sessions 2 --callgrind

Each turn appends the assistant message with its tool results (or a user message) to a memory
store session and builds the prompt, then converts it as ``BuildPrompt`` would for a client that
holds the previous prompt (``known_prompt``). Sessions: ``3 x repeat`` (or ``--sessions``) generated coding sessions
of 300K chars at a 32K window, as ``bench_service`` replays them, each of them new (a session
replayed twice would find its pieces tokenized and its messages' template dicts made already).
The turns run inside ``turn_loop``, so a profile can keep only the samples under it.

``--callgrind``: the run's instructions, as Callgrind counts them, are the turns' alone (the
instrumentation is switched on once the profile is loaded, the warm-up done and the sessions
made, and off after the last turn, before the exit frees everything): a figure that the
machine's speed does not move, to compare two versions of the code.

``--cold MB``: before each turn (outside its timing), write over MB megabytes of memory, so the
turn starts with the caches a replica under load finds: the other processes on the same cores (the
other replica, the agents, Redis) run between two of its turns and evict its data from the shared
last-level cache (32 MB here). 64 flushes it; 0 (the default) keeps the caches as the previous turn
left them, which no loaded replica sees.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

from budgeter.core.messages import from_openai_list
from budgeter.service import convert
from budgeter.sessions.sessions import Sessions
from budgeter.sessions.tokenizers import Tokenizers, settle
from budgeter.store import open_store
from budgeter.v1 import budgeter_pb2 as pb
from tests.bench.bench_service import pct, profile_spec, turns
from tests.bench.sessions import make_session


class Evictor:
    """Writes one byte per cache line over ``megabytes`` of memory on each call."""

    def __init__(self, megabytes: int) -> None:
        self.buffer = bytearray(megabytes << 20)
        self.zeros = bytes(len(range(0, len(self.buffer), 64)))

    def __call__(self) -> None:
        self.buffer[::64] = self.zeros


def turn_loop(sessions: Sessions, name: str, bodies: list[dict], evict: Evictor | None = None
              ) -> list[float]:
    times = []
    for body in bodies:
        info = sessions.create(tokenizer=name, tools=body["tools"], policy={"window": 32768})
        known = ""
        for turn in turns(body["messages"]):
            if evict is not None:
                evict()
            t0 = time.perf_counter()
            appended = sessions.append(info.id, from_openai_list(turn))
            built = sessions.build(info.id, after=appended, known=known)
            convert.build_to_pb(built, pb.PROMPT_VIEW_JSON)
            times.append((time.perf_counter() - t0) * 1000)
            known = built.prompt_id
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="qwen3.6")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--cold", type=int, default=0, metavar="MB",
                    help="write over MB megabytes before each turn (the caches a loaded replica finds)")
    ap.add_argument("--sessions", type=int, default=0, help="how many sessions (default: 3 x repeat)")
    ap.add_argument("--callgrind", action="store_true",
                    help="under valgrind --tool=callgrind --instr-atstart=no: count the turns' instructions only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = profile_spec(args.profile, tmp)
        if spec is None:
            raise SystemExit(f"{args.profile}: its files are absent here")
        tokenizers = Tokenizers({args.profile: spec}, default=args.profile)
        settle(tokenizers, [args.profile])  # loaded and warmed, then gc.freeze, as `budgeter serve` does
        sessions = Sessions(open_store("memory://"), tokenizers)
        turn_loop(sessions, args.profile, [make_session(1000, chars=300_000)])  # warm-up
        bodies = [make_session(seed, chars=300_000) for seed in range(args.sessions or 3 * args.repeat)]
        if args.callgrind:  # instructions from here on: the turns, not the set-up
            on = subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True, text=True)
            if on.returncode or "Error" in on.stdout + on.stderr:  # (it exits 0 when it finds no such process)
                raise SystemExit("--callgrind: run this under valgrind --tool=callgrind --instr-atstart=no")
        times = turn_loop(sessions, args.profile, bodies, Evictor(args.cold) if args.cold > 0 else None)
        if args.callgrind:  # and not the exit's freeing of the vocabularies (~100M instructions for Gemma 3's)
            subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True, text=True)
    caches = f", caches cold ({args.cold} MB written over before each turn)" if args.cold > 0 else ""
    print(f"{args.profile}{caches}: {len(times)} one-call turns in the session layer, "
          f"p50 {statistics.median(times):.2f} ms, p90 {pct(times, 0.9):.2f} ms, p99 {pct(times, 0.99):.2f} ms")


if __name__ == "__main__":
    main()
