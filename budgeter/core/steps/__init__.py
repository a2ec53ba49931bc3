"""The compaction pipeline, cheapest loss first. Adding a step is adding a function to a list.

``ALWAYS`` runs on every build (validity); ``COMPACT`` runs only when the prompt is over budget,
and compacts down to the low-water mark.
"""

from budgeter.core.steps.drop import cut_oversize, drop_oldest, drop_until
from budgeter.core.steps.failures import collapse_failures
from budgeter.core.steps.shrink import shrink_bulky
from budgeter.core.steps.snapshots import supersede_snapshots
from budgeter.core.steps.validity import normalize_pairing, stand_in_json

ALWAYS = [normalize_pairing, stand_in_json]
COMPACT = [collapse_failures, supersede_snapshots, shrink_bulky, drop_oldest]

__all__ = ["ALWAYS", "COMPACT", "cut_oversize", "drop_until"]
