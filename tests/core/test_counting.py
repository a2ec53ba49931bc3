"""PieceCounter: counts by pieces between special tokens, with a bounded cache; shared_prefix."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from budgeter.core.counting import PieceCounter, shared_prefix
from budgeter.tokenizers.backends import HFTokenizer

TEXTS = ["alpha beta<|im_end|>gamma", "alpha beta<|im_end|>delta<|im_start|>epsilon zeta",
         "gamma<|im_end|>alpha beta<|im_start|>eta<|im_end|>theta iota", "<|im_start|>kappa<|im_end|>"]


def test_a_full_cache_never_loses_the_pieces_being_counted(tiny_bpe_path):
    """With room for three pieces, counting a text whose first pieces are cached and whose last
    are not evicts half the cache first: the count still covers every piece (it used to evict the
    text's own cached pieces after finding what was missing, then fail to look them up)."""
    tok = HFTokenizer.from_file(tiny_bpe_path, name="tiny")
    small, reference = PieceCounter(tok, max_pieces=3), PieceCounter(tok)
    for _ in range(3):
        for text in TEXTS:
            assert small.count(text) == reference.count(text)
    for text in TEXTS:
        assert small.counted(text) == (reference.count(text), reference.piece_counts(text))
    assert len(small._cache) <= 3 + max(len(small.ordinary(t)) for t in TEXTS)


def test_counted_is_count_and_piece_counts(tiny_bpe_path):
    counter = PieceCounter(HFTokenizer.from_file(tiny_bpe_path, name="tiny"))
    for text in [*TEXTS, "", "<|im_end|>", "plain text, no special token"]:
        total, counts = counter.counted(text)
        assert total == counter.count(text)
        assert counts == counter.piece_counts(text) and len(counts) == len(counter.ordinary(text))
        assert total == sum(counts) + text.count("<|im_end|>") + text.count("<|im_start|>")


@given(st.text(alphabet="ab上", max_size=30), st.text(alphabet="ab上", max_size=30), st.integers(0, 40))
def test_shared_prefix_from_a_known_length_equals_a_plain_comparison(a, b, known):
    plain = shared_prefix(a, b)
    assert a[:plain] == b[:plain] and (plain == min(len(a), len(b)) or a[plain] != b[plain])
    assert shared_prefix(a, b, known=min(known, plain)) == plain
