"""The labelled tool results of ``tests/data/results/`` (see its FORMAT.md), and their split.

The text classifier is tuned on ``TUNE`` families only; figures are reported on ``HELD_OUT``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parents[1] / "data" / "results"
TUNE = ("swe-agent", "aider", "agent-sdks", "python", "c-build", "http")
HELD_OUT = ("openhands", "cline", "claude-code", "codex-cli", "opencode", "goose", "mcp-servers", "shell",
            "node", "rust-go")


@dataclass(frozen=True, slots=True)
class Entry:
    family: str
    tool: str
    op: str
    arguments: dict[str, Any]
    text: str
    failed: bool
    decoy: bool
    source: str


def load(families: tuple[str, ...] | None = None) -> list[Entry]:
    out = []
    for path in sorted(DIR.glob("*.jsonl")):
        if families is not None and path.stem not in families:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            raw = json.loads(line)
            args = raw.get("arguments")
            out.append(Entry(path.stem, str(raw["tool"]), str(raw.get("op", "other")),
                             args if isinstance(args, dict) else {}, str(raw["text"]), raw["label"] == "error",
                             bool(raw.get("decoy")), str(raw.get("source", ""))))
    return out
