"""PieceCounter: counts by pieces between special tokens, with a bounded cache; shared_prefix."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core.counting import PieceCounter, shared_prefix
from budgeter.tokenizers.backends import HFTokenizer

TEXTS = ["alpha beta<|im_end|>gamma", "alpha beta<|im_end|>delta<|im_start|>epsilon zeta",
         "gamma<|im_end|>alpha beta<|im_start|>eta<|im_end|>theta iota", "<|im_start|>kappa<|im_end|>"]


def test_a_full_cache_never_loses_the_pieces_being_counted(tiny_bpe_path):
    """With room for three pieces, counting a text whose first pieces are cached and whose last
    are not clears the cache on the way: the count still covers every piece (the cached ones are
    read before the new ones are kept)."""
    tok = HFTokenizer.from_file(tiny_bpe_path, name="tiny")
    small, reference = PieceCounter(tok, max_pieces=3), PieceCounter(tok)
    for _ in range(3):
        for text in TEXTS:
            assert small.count(text) == reference.count(text)
    for text in TEXTS:
        assert small.counted(text) == (reference.count(text), reference.counted(text)[1])
    assert len(small._cache) <= 3


def test_counted_is_count_and_piece_counts(tiny_bpe_path):
    counter = PieceCounter(HFTokenizer.from_file(tiny_bpe_path, name="tiny"))
    for text in [*TEXTS, "", "<|im_end|>", "plain text, no special token"]:
        total, counts = counter.counted(text)
        assert total == counter.count(text)
        assert len(counts) == len(counter.ordinary(text))
        assert total == sum(counts) + text.count("<|im_end|>") + text.count("<|im_start|>")


@given(st.text(alphabet="ab上", max_size=30), st.text(alphabet="ab上", max_size=30))
def test_shared_prefix_is_a_plain_comparison(a, b):
    plain = shared_prefix(a, b)
    assert a[:plain] == b[:plain] and (plain == min(len(a), len(b)) or a[plain] != b[plain])
    # told that some first characters are shared, it finds the same length
    assert [shared_prefix(a, b, known) for known in range(plain + 1)] == [plain] * (plain + 1)


def _reference_start(counter: PieceCounter, text: str, chars: int) -> int:
    """The piece start from the split of the whole text: the end of the last special token that
    ends at or before ``chars``."""
    start = pos = 0
    for k, part in enumerate(counter._split(text)):
        pos += len(part)
        if k % 2 and pos <= chars:
            start = pos
    return start


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["a", "b c", "\n", "<|im_end|>", "<|im_start|>", "<|im_", "end|>",
                                 "x" * 100]), max_size=40),
       st.booleans(), st.data())
def test_piece_start_and_tokens_after_follow_the_whole_split(tiny_bpe_path, parts, delimited, data):
    """Where a piece starts is where the split of the whole text says: also where a position falls
    between the two newlines of one ``\\n\\n`` token (cut there, the text would end with a
    one-newline token), and with a delimiter, where the scan starts at the last one before the
    position."""
    from tokenizers import AddedToken, Tokenizer

    hf = Tokenizer.from_file(tiny_bpe_path)
    hf.add_special_tokens([AddedToken("\n\n", special=True), AddedToken("\n", special=True)])
    counter = PieceCounter(HFTokenizer(hf, name="newlines"))
    if delimited:
        assert counter.delimit("<|im_start|>") == "<|im_start|>"
    text = "".join(parts)
    chars = data.draw(st.integers(0, len(text)))
    start = _reference_start(counter, text, chars)
    assert counter.piece_start(text, chars) == start
    after = counter.count(text[start:]) if chars < len(text) else 0
    assert counter.tokens_after(text, chars) == after
    assert counter.tokens_after(text, chars, total=counter.count(text)) == after


def _with_tokens(path: str, *tokens: str, lstrip: tuple[str, ...] = ()) -> HFTokenizer:
    from tokenizers import AddedToken, Tokenizer

    hf = Tokenizer.from_file(path)
    hf.add_special_tokens([AddedToken(t, special=True, lstrip=t in lstrip) for t in tokens])
    return HFTokenizer(hf, name="delimited")


def test_the_delimiter_is_the_most_frequent_special_token_no_other_overlaps(tiny_bpe_path):
    """A token that another one holds, or whose ends another one's ends overlap, is never chosen
    (a text cut there would be split otherwise than whole); nor one that starts or ends with
    whitespace (a whitespace-absorbing token could take it)."""
    sample = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert PieceCounter(HFTokenizer.from_file(tiny_bpe_path, name="tiny")).delimit(sample) == "<|im_start|>"
    for holder in ("<|im_start|>\n", "x<|im_start|>", "|im_start|"):
        assert PieceCounter(_with_tokens(tiny_bpe_path, holder)).delimit(sample) == "<|im_end|>"
    overlapped = PieceCounter(_with_tokens(tiny_bpe_path, "end|><|im_st", "<|im_end|>\n<|im"))
    assert overlapped.delimit(sample) == ""
    assert PieceCounter(_with_tokens(tiny_bpe_path, "\n")).delimit("\n\n<|im_end|>\n") == "<|im_end|>"
    assert PieceCounter(_with_tokens(tiny_bpe_path, " <x>")).delimit(" <x> <x> <x>") == ""
    for strip in ("lstrip", "rstrip"):  # it would take the whitespace of the segment beside it
        from tokenizers import AddedToken, Tokenizer

        hf = Tokenizer.from_file(tiny_bpe_path)
        hf.add_special_tokens([AddedToken("<x>", special=True, **{strip: True})])
        assert PieceCounter(HFTokenizer(hf, name=strip)).delimit("<x><x><x>" + sample) == "<|im_start|>"


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["a", "b c", " ", "\n", "<|im_start|>", "<|im_end|>", "<|im_", "start|>",
                                 "<x>", "\n\n", "|>"]), max_size=40))
def test_a_delimited_count_is_the_whole_split_count(tiny_bpe_path, parts):
    """Cut at the delimiter, counted by segments (cached or not), a text counts
    as its whole split counts, and its pieces' counts are the same: also beside whitespace-absorbing
    tokens and newline tokens."""
    tok = _with_tokens(tiny_bpe_path, "<x>", "\n", "\n\n", lstrip=("<x>",))
    whole, cut = PieceCounter(tok), _small(tok)
    assert cut.delimit("<|im_start|>a<|im_end|><|im_start|>b") == "<|im_start|>"
    text = "".join(parts)
    fresh = PieceCounter(tok)
    fresh.delimit("<|im_start|>")
    assert fresh.counted(text) == whole.counted(text)
    assert fresh.count(text) == cut.count(text) == whole.count(text)
    assert cut._segments.chars == sum(map(len, cut._segments)) <= 40
    assert all(len(segment) <= 10 for segment in cut._segments)  # a quarter of the room at most


def test_a_delimiter_that_the_position_cuts_is_not_where_the_scan_starts(tiny_bpe_path):
    """The scan starts at the last delimiter that ends at or before the position: one that the
    position falls inside holds no token that ends there, and the tokens before it still count."""
    counter = PieceCounter(HFTokenizer.from_file(tiny_bpe_path, name="tiny"))
    assert counter.delimit("<|im_start|>") == "<|im_start|>"
    text = "a<|im_end|>" + "x" * 300 + "<|im_start|>b"
    for chars in range(len(text) - 10, len(text)):
        expected = _reference_start(counter, text, chars)
        assert counter.piece_start(text, chars) == expected


def _small(tok, chars=40):
    """A counter whose segment memo holds ``chars`` characters."""
    counter = PieceCounter(tok)
    counter._segments.limit_chars = chars
    return counter


def test_the_segment_counts_kept_stay_within_their_room(tiny_bpe_path):
    """Segments are kept until the next would take the memo over its room, which is then cleared;
    a segment longer than a quarter of the room is counted and not kept."""
    counter = _small(HFTokenizer.from_file(tiny_bpe_path, name="tiny"))
    assert counter.delimit("<|im_start|>a<|im_start|>b") == "<|im_start|>"
    texts = [*"bcdefg", "h" * 9, "i" * 9, "j" * 9, "k" * 7, "l" * 10, "m" * 11]
    for text in texts:
        assert counter.count(text) == PieceCounter(counter.tokenizer).count(text)
        assert counter._segments.chars == sum(map(len, counter._segments)) <= 40
    assert list(counter._segments) == ["l" * 10]  # cleared for it; "m" * 11 is over a quarter
