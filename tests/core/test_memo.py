"""The memos' own accounting: each is bounded by the characters it holds, clears when an insert
would take it over, and a conversation's walks are one walk, its latest."""

from __future__ import annotations

import pytest

from budgeter.core import memo
from budgeter.core.memo import CharMemo, IdentityMemo, Walks


@pytest.fixture
def budget():
    before = memo.budget()
    memo.configure(100)
    yield 100
    memo.configure(before)


def test_a_char_memo_clears_before_going_over(budget):
    m: CharMemo[str, int] = CharMemo()
    for k in range(30):
        m.put(f"k{k}", k, 7)
        assert m.chars == 7 * len(m) <= budget
    assert len(m) < 30 and m.limit_chars == budget
    few: CharMemo[str, int] = CharMemo(3)
    for k in range(10):
        few.put(f"k{k}", k)
        assert len(few) <= 3


def test_an_identity_memo_counts_its_answers_sizes(budget):
    m = IdentityMemo(size=len)
    keys = [object() for _ in range(30)]
    for k in keys:
        assert m.get((k,), lambda: "x" * 9) == "x" * 9
        assert m._items.chars == 9 * len(m._items) <= budget


def test_a_conversation_holds_one_walk_and_the_walks_stay_in_budget():
    before = memo.budget()
    memo.configure(1000)
    try:
        w: Walks[int] = Walks(size=len)
        one = [f"one {k:05}" for k in range(60)]  # 9 characters each
        for end in range(20, 30):  # past the shared start, each walk replaces the one it extends
            items = one[:end]  # (the same list to find and keep, as a build passes its request)
            assert w.find(items) == ((end - 1, end - 1) if end > 20 else (None, 0))
            w.keep(items, end)
            assert len(w._items) == 1 and w._items.chars == 9 * end
        two = [f"two {k:05}" for k in range(200)]
        for end in range(20, 200, 10):  # another conversation, longer than the budget holds
            items = two[:end]
            w.find(items)
            w.keep(items, end)
            assert w._items.chars <= 1000
        assert w.find(one[:30]) == (None, 0)  # cleared on the way
    finally:
        memo.configure(before)


def test_a_list_that_replaced_the_last_items_finds_the_walk_before_them():
    """A build's prompt may replace the last messages of the previous one (a failed call and its
    result, collapsed once the model answered them): it no longer holds that walk's last item, and
    must still find the walk for all it shares, not walk the whole window again; the older walk
    is then replaced (a conversation holds one walk)."""
    w: Walks[int] = Walks(size=len)
    items = [f"m{k:03}" for k in range(40)]
    w.find(items)
    w.keep(items, 40)
    for turn in range(1, 6):
        replaced = [f"tidied {turn}", f"tidied result {turn}"]
        nxt = [*items[:-2], *replaced, *[f"new {turn}.{k}" for k in range(turn % 3)]]
        assert w.find(nxt) == (40 + 3 * (turn - 1), len(items) - 2)
        w.keep(nxt, 40 + 3 * turn)
        assert len(w._items) == 1 and w._items.chars == sum(map(len, nxt))
        items = nxt
    far = [*items[:-(memo.TAIL + 2)], "a", "b", "c", "d", "e", "f"]  # more than TAIL replaced: not met
    assert w.find(far) == (None, 0)


def test_configure_resizes_and_clears_what_is_over():
    before = memo.budget()
    m: CharMemo[str, int] = CharMemo()
    m.put("a", 1, 500)
    try:
        memo.configure(1000)
        assert m.limit_chars == 1000 and len(m) == 1
        memo.configure(100)
        assert m.limit_chars == 100 and len(m) == 0 and m.chars == 0
    finally:
        memo.configure(before)


def test_two_lists_ending_alike_keep_a_walk_each_and_each_finds_its_own():
    """A session's prompt and its history as received end with the same message: each build
    walks both, and each must find its own walk (one walk per last item made them replace each
    other, and the history was walked whole on every build)."""
    w: Walks[str] = Walks(size=len)
    shared = [f"m{k}" for k in range(40)]
    history = [*shared, "last"]
    prompt = [*shared[:3], "digest", *shared[10:], "last"]  # longer than a shared start (SHARED_START)
    for turn in range(4):
        for name, items in (("prompt", prompt), ("history", history)):
            found, n = w.find(items)
            if turn:  # (on the first, the history finds the prompt's walk: they share a start)
                assert found is not None and found.startswith(name) and n == len(items) - 1
            w.keep(items, f"{name} {len(items)}")
        history = [*history, f"h{len(history)}"]
        prompt = [*prompt, history[-1]]
    assert len(w._items) == 2  # each replaced its own older walk


def test_same_objects_reads_identity_and_takes_equal_items_before_a_shared_last():
    a, b, c = {"k": 1}, {"k": 1}, {"k": 2}
    assert memo.same_objects([a, c], [a, c, b]) == 2
    assert memo.same_objects([a, c], [b, c]) == 2  # equal before a shared last: the same answer
    assert memo.same_objects([a, c], [a, b]) == 1
    assert memo.same_objects([c, a], [b, a]) == 0  # c != b
    assert memo.same_objects([], [a]) == 0
