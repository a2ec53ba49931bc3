"""Profile a ~1 MB transcript with two tokenizers, time it, and screenshot the HTML report.

    python -m tests.bench.bench_profile [--chars 1000000] [--screenshot tests/bench/profile.png]

Runs ``budgeter profile`` as a user would (a fresh process: tokenizer loads included), then opens
the HTML report in Debian's headless chromium when it is installed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.sessions import make_session

SHARED_QWEN3 = Path(__file__).resolve().parents[3] / "shared" / "tokenizers" / "qwen3"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=1_000_000)
    ap.add_argument("--screenshot", type=Path, default=None)
    args = ap.parse_args()
    second = str(SHARED_QWEN3) if (SHARED_QWEN3 / "tokenizer.json").exists() else "mistral-tekken"
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "session.json"
        body.write_text(json.dumps(make_session(4, chars=args.chars)))
        page = Path(tmp) / "report.html"
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "budgeter", "profile", str(body), "-t", "qwen3.6",
                              "-t", second, "--html", str(page), "--json"],
                             capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - started
        profiles = json.loads(out.stdout)
        size = body.stat().st_size
        print(f"transcript {size / 1e6:.2f} MB, {len(profiles[0]['messages'])} messages, "
              f"2 tokenizers: {seconds:.2f} s wall (process start and tokenizer loads included)")
        for p in profiles:
            print(f"  {p['tokenizer']:10s} {p['tokens']:>9,} tokens, load {p['load_seconds']:.2f} s, "
                  f"encode {p['encode_mb_per_s']:.1f} MB/s, waste {p['waste']['total']:,}")
        chromium = shutil.which("chromium")
        if args.screenshot and chromium:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--window-size=1600,1500", f"--screenshot={args.screenshot.resolve()}",
                            f"file://{page}"], capture_output=True, check=True, timeout=120)
            print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
    main()
