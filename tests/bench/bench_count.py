"""What counting new text costs a profile, in nanoseconds of CPU a character: the installed
packages' Python sources (text no warm-up has seen, part of it not all ASCII; up to 20K characters
a file), each counted once as a turn counts its new text: split at the added tokens, each piece
not met before tokenized by the profile's backend and cached.

    python -m tests.bench.bench_count [--profiles qwen3.6,qwen3,llama3,gemma3] [--chars 2000000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sysconfig
import tempfile
import time
from pathlib import Path

from budgeter.sessions.tokenizers import Tokenizers
from tests.bench.bench_service import profile_spec


def sources(chars: int, seed: int) -> list[str]:
    """Up to ``chars`` characters of installed Python sources, in an order ``seed`` shuffles."""
    files = sorted(Path(sysconfig.get_paths()["purelib"]).rglob("*.py"))
    random.Random(seed).shuffle(files)
    texts: list[str] = []
    total = 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")[:20_000]
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            texts.append(text)
            total += len(text)
        if total >= chars:
            break
    return texts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="qwen3.6,qwen3,llama3,gemma3")
    ap.add_argument("--chars", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    texts = sources(args.chars, args.seed)
    n = sum(map(len, texts))
    wide = sum(not t.isascii() for t in texts)
    print(f"{n:,} characters of installed sources ({len(texts)} files, {wide} not all ASCII), counted once")
    for name in args.profiles.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            spec = profile_spec(name, tmp)
            if spec is None:
                print(f"  {name:<16} skipped: its files are absent here")
                continue
            pieces = Tokenizers({name: spec}, default=name).counter(name).pieces
            tokenizer = pieces.tokenizer
            tokenizer.count_batch(["set up in this thread first"])  # (fastokens' per-thread set-up)
            started = time.process_time()
            tokens = sum(map(pieces.count, texts))
            spent = time.process_time() - started
            print(f"  {name:<16} {spent / n * 1e9:6.1f} ns a character  ({tokens:,} tokens)  {tokenizer.note}")


if __name__ == "__main__":
    main()
