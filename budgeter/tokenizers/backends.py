"""Tokenizer backends: Hugging Face ``tokenizers`` and tiktoken.

Each counts ordinary text (the pieces between special tokens) and names the pattern that matches
special/added tokens as single tokens, including whitespace that ``lstrip``/``rstrip`` added
tokens absorb, so ``PieceCounter`` stays exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from budgeter.tokenizers import cache
from budgeter.tokenizers.promoted import promoted
from budgeter.tokenizers.twin import (
    LATER_CHARS,
    Background,
    Later,
    _byte_alphabet,
    backgrounded,
    deferred,
    state,
    twin,
)


def _alternation(tokens: Iterable[str]) -> str:
    """A regex matching the longest of ``tokens`` at a position, as a character trie: Python's
    ``re`` tries a flat alternation one branch at a time, too slow for thousands (``bench_service``)."""
    trie: dict[str, dict] = {}
    for token in set(tokens):
        if token:
            node = trie
            for ch in token:
                node = node.setdefault(ch, {})
            node[""] = {}
    return _trie_regex(trie)


KEPT_TOKENS = 256
"""From how many added tokens their pattern is kept in the tokenizer cache."""


def _kept_alternation(tokens: list[str]) -> str:
    """``_alternation``, through the tokenizer cache for a vocabulary with ``KEPT_TOKENS`` or more
    added tokens: Gemma 3's 6,384 took 24 ms to build at every load (``bench_flat``, ready)."""
    if len(tokens) < KEPT_TOKENS or cache.location() is None:
        return _alternation(tokens)
    unique = sorted(set(tokens))
    listed = "".join(f"{len(t)}:{t}" for t in unique)
    return cache.fetch("specials", cache.text_digest(listed), [cache.source_digest(__file__)],
                       lambda: _alternation(unique))


def _trie_regex(node: dict[str, dict]) -> str:
    """The trie as a regex; children whose subtries read the same share one branch, their first
    characters a class (``[0-9]>`` for Gemma's ``<unused0>`` to ``<unused6241>``): a branch each
    made a GGUF vocabulary's pattern 22K characters, 60 ms to build and compile at every load
    (``bench_flat``, ready). Branches start with distinct characters, so their order matches nothing
    differently."""
    by_rest: dict[str, list[str]] = {}
    for ch, child in sorted(node.items()):
        if ch:
            by_rest.setdefault(_trie_regex(child), []).append(ch)
    branches = sorted((re.escape(chars[0]) if len(chars) == 1 else "[" + "".join(map(re.escape, chars)) + "]") + rest
                      for rest, chars in by_rest.items())
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" not in node:
        return body
    return f"(?:{body})?"  # greedy: the longer token first, this one if the longer fails


class HFTokenizer:
    def __init__(self, tok: Any, *, name: str, nfc: bool = True, promote: bool = False) -> None:
        """``nfc``: False for a server that does not apply the tokenizer's NFC normalizer
        (llama.cpp): ``tok`` (owned from here on) then loses it, for counts and ids alike.
        ``promote``: match the ordinary entries llama.cpp makes special at load as one token
        (``promoted.py``), added to ``tok`` as special tokens with their own ids."""
        self.name = name
        unnormalized = not nfc and state(tok.normalizer) == {"type": "NFC"}
        if unnormalized:
            tok.normalizer = None
        self._tok = tok
        self.promoted = _promote(tok) if promote else []
        added = [a for a in tok.get_added_tokens_decoder().values() if a.content]
        # tokens that absorb whitespace beside them first (longest first), then one trie of the rest
        stripping = sorted((a for a in added if a.lstrip or a.rstrip), key=lambda a: -len(a.content))
        parts = [(r"\s*" if a.lstrip else "") + re.escape(a.content) + (r"\s*" if a.rstrip else "")
                 for a in stripping]
        plain = _kept_alternation([a.content for a in added if not (a.lstrip or a.rstrip)])
        self._pattern = "|".join([*parts, plain] if plain else parts)
        self.specials = tuple(a.content for a in tok.get_added_tokens_decoder().values())
        split = re.compile(f"({self._pattern})").split if self._pattern else None
        pieces = (lambda text: split(text)[0::2]) if split is not None else None
        self._later: Later | Background | None = (Later(tok, pieces) if deferred() else
                                                  Background(tok, pieces) if backgrounded() else None)
        self._fast = twin(tok, pieces) if self._later is None else None
        self.note = ("count backend: fastokens twin of the tokenizer.json (ids checked equal at load)"
                     if self._fast is not None else "count backend: Hugging Face tokenizers")
        if isinstance(self._later, Later):
            self.note += (f" (a fastokens twin, its ids checked equal when made, counts once this process "
                          f"has counted {LATER_CHARS:,} characters)")
        elif self._later is not None:
            self.note += (" (a fastokens twin, made in the background from load and its ids checked equal, "
                          "counts once it is made)")
        if unnormalized:
            self.note += ("; the tokenizer's NFC normalizer is not applied, as the server applies none "
                          "(text NFC would change, such as decomposed accents, counts as the server reads it)")

        if self.promoted:
            self.note += ("; matched as one token, as llama.cpp marks them special at load: "
                          + ", ".join(self.promoted))

    @classmethod
    def from_file(cls, path: str, *, name: str, nfc: bool = True, promote: bool = False) -> HFTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(path), name=name, nfc=nfc, promote=promote)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        fast, later = self._fast, self._later
        if later is not None:
            made = later.made  # (read first: a background twin may be made during the call)
            fast = self._fast = later(sum(len(t) for t in texts))
            if made or (later.made and fast is not None):
                self._later = None
        if fast is not None:
            return fast.many(texts)
        encode = self._tok.encode
        return [len(encode(t, add_special_tokens=False).ids) for t in texts]

    def special_pattern(self) -> str:
        return self._pattern

    def encode_full(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def _promote(tok: Any) -> list[str]:
    """Add the entries llama.cpp makes special to ``tok`` as special tokens (the same ids)."""
    from tokenizers import AddedToken

    model = tok.model  # (its entries only, not the added tokens; no copy of a 262K-entry vocabulary)
    found = promoted(lambda text: model.token_to_id(text) is not None,
                     {a.content for a in tok.get_added_tokens_decoder().values()})
    if found:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in found])
    return found


def promoted_ranks(ranks: dict[bytes, int], specials: dict[str, int]) -> dict[str, int]:
    """Of a tiktoken vocabulary (``ranks``, with its ``specials``), the entries llama.cpp makes
    special at load and their ids (compared as a GGUF stores them: in GPT-2's byte alphabet)."""
    alphabet = {b: c for c, b in _byte_alphabet().items()}

    def has(text: str) -> bool:
        raw = text.encode()
        return raw in ranks and "".join(alphabet[b] for b in raw) == text

    return {t: ranks[t.encode()] for t in promoted(has, specials)}


class TiktokenTokenizer:
    """A tiktoken vocabulary, counted by tiktoken."""

    def __init__(self, encoding: Any, *, name: str) -> None:
        self.name = name
        self._enc = encoding
        self.specials = tuple(encoding.special_tokens_set)
        self._pattern = _alternation(self.specials)
        self.note = "count backend: tiktoken"

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        enc = self._enc.encode_ordinary
        return [len(enc(t)) for t in texts]

    def special_pattern(self) -> str:
        return self._pattern

    def encode_full(self, text: str) -> list[int]:
        return list(self._enc.encode(text, allowed_special="all"))


O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])


def load_ranks(path: str) -> dict[bytes, int]:
    """A ``.tiktoken`` file's ranks as tiktoken's ``load_tiktoken_bpe`` parses them, through the
    tokenizer cache: parsing the built-in vocabulary's 248K base64 lines was a quarter of
    ``budgeter trim``'s start (``bench_flat``, ready). Keyed by the file's hash, tiktoken's version
    and this module's code."""
    import tiktoken

    digest = cache.file_digest(path)

    def build() -> tuple[list[bytes], list[int] | None]:
        from tiktoken.load import load_tiktoken_bpe

        # the hash: tiktoken keeps a copy of every file it reads, by path, in a temporary folder,
        # and without it would read that copy after the file changed
        ranks = load_tiktoken_bpe(path, expected_hash=digest)
        values = list(ranks.values())
        return list(ranks), None if values == list(range(len(values))) else values

    tokens, values = cache.fetch("tiktoken", digest, [tiktoken.__version__, cache.source_digest(__file__)], build)
    return dict(zip(tokens, values if values is not None else range(len(tokens)), strict=True))


def tiktoken_file(path: str, *, name: str, pattern: str = O200K_PATTERN,
                  specials: Sequence[str] = ()) -> TiktokenTokenizer:
    """A ``.tiktoken`` vocabulary; special tokens get the ids after the largest rank."""
    import tiktoken

    ranks = load_ranks(path)
    start = max(ranks.values()) + 1
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={t: start + i for i, t in enumerate(specials)})
    return TiktokenTokenizer(enc, name=name)
