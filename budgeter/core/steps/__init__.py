"""The compaction pipeline, cheapest loss first. Adding a step is adding a function to a list.

``ALWAYS`` runs on every build: validity (pairing, JSON stand-ins) and the hygiene of failed calls
(a failure the model has answered collapses; identical retries fold). ``COMPACT`` runs only when
the prompt is over budget and compacts down to the low-water mark: the arguments of failures not
answered yet, stale snapshots, repeated
outputs, old bulky outputs oldest first, then whole turns; its last step fits the budget by the
exact count.
"""

from budgeter.core.steps.drop import cut_oversize, drop_oldest, drop_until, fit_exact
from budgeter.core.steps.failures import collapse_pending_failures, tidy_failures
from budgeter.core.steps.shrink import fold_repeated_outputs, shrink_bulky
from budgeter.core.steps.snapshots import supersede_snapshots
from budgeter.core.steps.validity import normalize_pairing, stand_in_json

ALWAYS = [normalize_pairing, stand_in_json, tidy_failures]
COMPACT = [collapse_pending_failures, supersede_snapshots, fold_repeated_outputs, shrink_bulky, drop_oldest, fit_exact]

__all__ = ["ALWAYS", "COMPACT", "cut_oversize", "drop_until", "fit_exact"]
