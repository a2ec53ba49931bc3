"""Instructions per one-call turn in the session layer, counted by callgrind: a per-turn figure that
does not move with the machine's load or speed, for comparing two trees on a busy machine.

    python -m tests.bench.bench_instructions [--sizes 100000 1000000] [--turns 40]

For each size, a child process replays a held-out session (``peers.session``, as ``bench_flat``
draws them; seed 200 at every size) through the session layer both front doors share, one call a
turn as ``BuildPrompt`` does it (parse the turn's messages, ``Sessions.append``, ``Sessions.build``
after it), on the memory store with the default tokenizer, settled as ``budgeter serve`` settles.
Another held-out session of the same size (``WARM_SEED``) is replayed first, to warm the process,
and the measured session's last ``--turns`` turns are counted: the child runs under ``valgrind
--tool=callgrind`` with collection off, switched on around each counted turn and dumped after it
(callgrind's client requests, from a helper compiled here with the system's gcc and valgrind
headers). Prints each size's instructions per turn, p50 / p90 / mean, the p50's ratio to the
smallest size's and the characters a counted turn tokenized, on average (hash seed fixed: a tree's
counts repeat within a fraction of a percent). gRPC's own cost per call is not in it
(``bench_flat`` measures the whole process). Exits 2 with the reason where valgrind, its headers or
gcc are missing. A run takes a few minutes per size.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WARM_SEED = 201
"""The session replayed before the measured one: another session, not the measured one again, whose
texts would all be counted already, so that no counted turn tokenized anything (a server's turns
tokenize their new messages: 1,180 characters a turn on average at 100K chars)."""

HELPER = r"""
#include <valgrind/callgrind.h>
void turn_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void turn_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS; }
"""


def missing() -> str:
    for tool in ("valgrind", "gcc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/usr/include/valgrind/callgrind.h").exists():
        return "valgrind's headers (callgrind.h) are not installed"
    return ""


def helper(folder: str) -> str:
    source, lib = Path(folder) / "turns.c", Path(folder) / "libturns.so"
    source.write_text(HELPER)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return str(lib)


def child(chars: int, turns_counted: int, lib: str, out: str) -> None:
    """The replay, run under callgrind: each counted turn between ``turn_on`` and ``turn_off``; the
    characters the counted turns tokenized are written to ``out``."""
    import ctypes

    from tests.bench.bench_service import one_call_turns, session_layer
    from tests.bench.peers import session

    counted = ctypes.CDLL(lib)
    sessions = session_layer("memory://")
    pieces = getattr(sessions.tokenizers.counter(""), "pieces", None)
    tokenized = 0
    for replay, seed in enumerate((WARM_SEED, 200)):
        steps = one_call_turns(sessions, session(seed, chars))
        first = max(0, len(steps) - turns_counted)
        for k, turn in enumerate(steps):
            count = replay == 1 and k >= first
            if count:
                before = getattr(pieces, "chars_tokenized", 0)
                counted.turn_on()
            turn()
            if count:
                counted.turn_off()
                tokenized += getattr(pieces, "chars_tokenized", 0) - before
    Path(out).write_text(str(tokenized))


def measure(chars: int, turns_counted: int, folder: str, lib: str) -> tuple[list[int], int]:
    """Each counted turn's instructions, sorted, and the characters the counted turns tokenized."""
    out = Path(folder) / f"cg-{chars}"
    out.mkdir()
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           f"--callgrind-out-file={out}/cg.out", sys.executable, "-m", "tests.bench.bench_instructions",
           "--child", str(chars), "--turns", str(turns_counted), "--lib", lib, "--out", f"{out}/tokenized"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # (set and dict orders, hence counts, repeat)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    counts = []
    for path in glob.glob(f"{out}/cg.out*"):
        with open(path) as f:
            total = next((int(line.split()[1]) for line in f if line.startswith(("totals:", "summary:"))), 0)
        if total:  # (the dump at exit holds nothing: collection was off)
            counts.append(total)
    return sorted(counts), int((out / "tokenized").read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lib", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.turns, a.lib, a.out)
        return
    why = missing()
    if why:
        print(f"bench_instructions: {why}", file=sys.stderr)
        raise SystemExit(2)
    print(" ".join(["    python -m tests.bench.bench_instructions", *(argv if argv is not None else sys.argv[1:])]))
    print(f"\n| history chars | turns | instructions p50 | p90 | mean | p50 vs {a.sizes[0]:,} "
          "| new chars tokenized per turn |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        lib = helper(folder)
        base = None
        for chars in a.sizes:
            counts, tokenized = measure(chars, a.turns, folder, lib)
            p50 = statistics.median(counts)
            base = base or p50
            print(f"| {chars:,} | {len(counts)} | {p50 / 1e6:.2f}M | {counts[int(len(counts) * 0.9)] / 1e6:.2f}M "
                  f"| {sum(counts) / len(counts) / 1e6:.2f}M | {p50 / base:.2f}x | {tokenized / len(counts):,.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
