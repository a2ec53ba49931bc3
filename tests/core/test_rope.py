"""``Rope``: a prompt text cut and extended turn after turn reads exactly as the same ``str``."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core import rope
from budgeter.core.counting import PieceCounter, shared_prefix
from budgeter.core.rope import Rope

ALPHABET = st.sampled_from(["a", "b", "<s>", "\n", "é", "\U0001F600", "</s>", " "])
TEXTS = st.lists(ALPHABET, max_size=40).map("".join)


class SpecialTokens:
    """A tokenizer stand-in whose only job here is its special-token pattern (counts: 1 a char)."""

    def special_pattern(self) -> str:
        return "|".join(map(re.escape, ["<s>", "</s>", "\n\n"]))

    def count_batch(self, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]


@settings(max_examples=300, deadline=None)
@given(first=TEXTS, steps=st.lists(st.tuples(st.floats(0, 1), TEXTS), max_size=80), data=st.data())
def test_a_rope_reads_as_the_text_it_stands_for(first: str, steps: list[tuple[float, str]], data: st.DataObject
                                                ) -> None:
    text: str = first
    made: rope.Text = first
    for share, tail in steps:
        at = int(len(text) * share)
        text, made = text[:at] + tail, rope.cut(made, at, tail)
        assert isinstance(made, Rope) and len(made) == len(text) and made == text and str(made) == text
        assert len(made.parts) <= rope.MERGE
    n = len(text)
    for _ in range(5):
        a = data.draw(st.integers(-n - 2, n + 2))
        b = data.draw(st.integers(-n - 2, n + 2))
        assert made[a:b] == text[a:b] and made[a:] == text[a:] and made[:b] == text[:b]
        probe = text[max(0, a):max(0, a) + 3]
        assert made.startswith(probe) == text.startswith(probe)
        assert made.endswith(probe) == text.endswith(probe)
        assert made.endswith(probe, 0, b) == text.endswith(probe, 0, b)


@settings(max_examples=200, deadline=None)
@given(base=TEXTS, tails=st.lists(TEXTS, min_size=1, max_size=6), data=st.data())
def test_counting_a_rope_equals_counting_its_text(base: str, tails: list[str], data: st.DataObject) -> None:
    pieces = PieceCounter(SpecialTokens())  # type: ignore[arg-type]
    made: rope.Text = base
    text = base
    for tail in tails:
        at = data.draw(st.integers(0, len(text)))
        text, made = text[:at] + tail, rope.cut(made, at, tail)
    total = pieces.count(text)
    for chars in range(len(text) + 1):
        assert pieces.piece_start(made, chars) == pieces.piece_start(text, chars)
        known = pieces.piece_start(text, chars // 2)
        assert pieces.piece_start(made, chars, known) == pieces.piece_start(text, chars, known)
        after = pieces.tokens_after(text, chars)  # the suffix split
        assert pieces.tokens_after(made, chars) == after
        assert pieces.tokens_after(made, chars, total=total) == after  # the shorter side split
    other = text[:len(text) // 2] + "x"
    assert shared_prefix(made, other) == shared_prefix(text, other)


def test_a_rope_is_not_a_sequence_of_characters() -> None:
    made = Rope(["ab", "cd"])
    try:
        made[1]  # type: ignore[index]
    except TypeError as exc:
        assert "slices" in str(exc)
    else:
        raise AssertionError("an index must be refused")
    assert made != "abce" and made == Rope(["a", "bcd"]) and hash(made) == hash("abcd")
