"""Tokenizer backends: Hugging Face ``tokenizers`` and tiktoken.

Each counts ordinary text (the pieces between special tokens) and names the pattern that matches
special/added tokens as single tokens, including whitespace that ``lstrip``/``rstrip`` added
tokens absorb, so ``PieceCounter`` stays exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any


def _alternation(tokens: Iterable[str]) -> str:
    return "|".join(re.escape(t) for t in sorted(set(tokens), key=len, reverse=True) if t)


class HFTokenizer:
    def __init__(self, tok: Any, *, name: str) -> None:
        self.name = name
        self._tok = tok
        parts = []
        for added in tok.get_added_tokens_decoder().values():
            if not added.content:
                continue
            core = re.escape(added.content)
            left = r"\s*" if added.lstrip else ""
            right = r"\s*" if added.rstrip else ""
            parts.append((len(added.content), left + core + right))
        self._pattern = "|".join(p for _, p in sorted(parts, key=lambda x: -x[0]))
        self.specials = tuple(a.content for a in tok.get_added_tokens_decoder().values())

    @classmethod
    def from_file(cls, path: str, *, name: str) -> HFTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(path), name=name)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        if len(texts) == 1:
            return [len(self._tok.encode(texts[0], add_special_tokens=False).ids)]
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def special_pattern(self) -> str:
        return self._pattern

    def encode_full(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


class TiktokenTokenizer:
    def __init__(self, encoding: Any, *, name: str) -> None:
        self.name = name
        self._enc = encoding
        self.specials = tuple(encoding.special_tokens_set)
        self._pattern = _alternation(self.specials)

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


def tiktoken_file(path: str, *, name: str, pattern: str = O200K_PATTERN,
                  specials: Sequence[str] = ()) -> TiktokenTokenizer:
    """A ``.tiktoken`` vocabulary; special tokens get the ids after the largest rank."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(path)
    start = max(ranks.values()) + 1
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={t: start + i for i, t in enumerate(specials)})
    return TiktokenTokenizer(enc, name=name)
