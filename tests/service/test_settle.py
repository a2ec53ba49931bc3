"""A server process settles at start: what the first turns would load is loaded, and every object
alive then leaves the collector's generations, so full collections walk only session data."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, sys
from budgeter.service.profiles import Profiles, settle
profiles = Profiles(default="qwen3.6")
settle(profiles, ["qwen3.6"])
print(gc.get_freeze_count(), "jsonschema" in sys.modules, len(gc.get_objects()))
"""


def test_settle_loads_the_first_turn_work_and_freezes_it():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    frozen, validator, walked = int(out[0]), out[1], int(out[2])
    assert frozen > 50_000 and validator == "True"
    assert walked < frozen // 20  # what a full collection still walks: a few objects, not the libraries
