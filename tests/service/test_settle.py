"""A server process settles at start: what the first turns would load is loaded, every object
alive then leaves the collector's generations, so full collections walk only session data, and
young objects are collected less often, so a turn's temporaries die before they are promoted."""

from __future__ import annotations

import subprocess
import sys

from budgeter.sessions.tokenizers import YOUNG

SCRIPT = """
import gc, sys
from budgeter.sessions.tokenizers import Tokenizers, settle
tokenizers = Tokenizers(default="qwen3.6")
settle(tokenizers, ["qwen3.6"])
print(gc.get_freeze_count(), "jsonschema" in sys.modules, len(gc.get_objects()), gc.get_threshold()[0])
"""


def test_settle_loads_the_first_turn_work_and_freezes_it():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    frozen, validator, walked, young = int(out[0]), out[1], int(out[2]), int(out[3])
    assert frozen > 20_000 and validator == "True"  # the libraries a turn uses (the base install's: no transformers)
    assert young == YOUNG > 700  # Python's default
    assert walked < frozen // 20  # what a full collection still walks: a few objects, not the libraries
