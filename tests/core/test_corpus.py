"""The text classifier against the labelled results of real tools (tests/data/results/), and the
hygiene of sessions worded by the families it was not tuned on."""

from __future__ import annotations

import pytest

from budgeter.core import Policy
from tests.bench.bench_classify import figures
from tests.bench.bench_hygiene import replay_truth
from tests.bench.corpus import HELD_OUT, TUNE, load
from tests.bench.worded import worded_session


def test_every_entry_names_its_source_and_both_splits_are_there():
    entries = load()
    assert {e.family for e in entries} == set(TUNE + HELD_OUT)
    assert all(e.source for e in entries)
    for family in TUNE + HELD_OUT:
        mine = [e for e in entries if e.family == family]
        assert any(e.failed for e in mine) and any(e.decoy for e in mine), family


def test_no_decoy_is_taken_as_failed_and_precision_holds_on_held_out_families():
    tune, held = figures(load(TUNE)), figures(load(HELD_OUT))
    assert tune["decoys_flagged"] == held["decoys_flagged"] == 0
    assert tune["false_alarms"] == 0 and held["precision"] >= 0.97
    assert held["recall"] >= 0.75  # a guard against a classifier that says nothing


@pytest.mark.parametrize("seed", [0, 1])
def test_held_out_sessions_show_no_success_as_failed_and_fold_every_retry(qwen36, seed):
    f = replay_truth(qwen36, worded_session(HELD_OUT, seed, chars=60_000), Policy(window=32768, reserve=2048))
    assert f["shown_failed"] == 0 and f["elided_ok"] == 0
    assert f["folded"] == f["retries"] > 0
    assert not f["wrong"]


def test_a_long_session_leaves_no_identified_payload_and_a_prefix_cache_rereads_little(qwen36):
    """A held-out session of 900K characters, which compacts many times, with the default policy:
    every failed call some evidence identified has lost its long argument leaves once answered,
    and a prefix-caching server re-reads at most 1.5x the tokens the agent appended (why the
    default low-water mark is half the budget: at 0.75 this session re-reads over 1.7x)."""
    f = replay_truth(qwen36, worded_session(HELD_OUT, 200, chars=900_000), Policy(window=32768, reserve=2048))
    assert f["sums"][5] > 0 and f["failed_share_known"] == 0
    assert f["shown_failed"] == 0
    assert f["reread"] <= 1.5
