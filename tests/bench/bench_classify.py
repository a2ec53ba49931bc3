"""The text classifier on labelled real tool results: precision and recall per family.

    python -m tests.bench.bench_classify [--families held-out|tune|all] [--misses]

Each entry of ``tests/data/results/`` is one tool result worded as a real project's tool words it
(its ``source`` says where). The classifier is tuned on the tune families and reported on the
held-out ones (``tests/bench/corpus.py``); ``--misses`` lists each wrong answer of the families
printed (look only at the tune families' while changing the classifier). Only the result's text
and its call are given here: the declared status
and what the model did next, which decide most failures in a session, are measured by
``bench_hygiene``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from budgeter.core.classify import ResultStatus, call_kind, file_op, result_status
from budgeter.core.policy import FileTools
from tests.bench.corpus import HELD_OUT, TUNE, Entry, load


def predict(e: Entry) -> bool:
    op, path = file_op(e.tool, e.arguments, FileTools())
    status, _ = result_status(e.text, kind=call_kind(e.tool, e.arguments, op), target=path,
                              tool=e.tool)
    return status is ResultStatus.ERROR


def figures(entries: Iterable[Entry]) -> dict[str, float]:
    tp = fp = fn = tn = decoys = decoys_flagged = 0
    for e in entries:
        said = predict(e)
        tp += said and e.failed
        fp += said and not e.failed
        fn += e.failed and not said
        tn += not said and not e.failed
        decoys += e.decoy
        decoys_flagged += e.decoy and said
    return {"n": tp + fp + fn + tn, "failures": tp + fn, "precision": tp / (tp + fp) if tp + fp else 1.0,
            "recall": tp / (tp + fn) if tp + fn else 1.0, "false_alarms": fp, "decoys": decoys,
            "decoys_flagged": decoys_flagged}


def table(groups: dict[str, list[Entry]]) -> list[str]:
    rows = ["| families | results | failures | precision | recall | successes taken as failed "
            "| decoys taken as failed |",
            "|---|---|---|---|---|---|---|"]
    for name, entries in groups.items():
        f = figures(entries)
        rows.append(f"| {name} | {f['n']:.0f} | {f['failures']:.0f} | {f['precision']:.1%} | {f['recall']:.1%} "
                    f"| {f['false_alarms']:.0f} | {f['decoys_flagged']:.0f} of {f['decoys']:.0f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", choices=("held-out", "tune", "all"), default="held-out")
    ap.add_argument("--misses", action="store_true", help="list each wrong answer")
    a = ap.parse_args()
    fams = {"held-out": HELD_OUT, "tune": TUNE, "all": TUNE + HELD_OUT}[a.families]
    entries = load(fams)
    groups = {f: es for f in fams if (es := [e for e in entries if e.family == f])}
    for name, members in (("all tune", TUNE), ("all held out", HELD_OUT)):
        if set(members) & set(fams):
            groups[name] = [e for e in entries if e.family in members]
    print("\n".join(table(groups)))
    if a.misses:
        for e in entries:
            if predict(e) != e.failed:
                kind = "missed" if e.failed else "false alarm"
                print(f"\n[{kind}] {e.family} {e.tool} ({e.op}): {e.text[:300]!r}")


if __name__ == "__main__":
    main()
