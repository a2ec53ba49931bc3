"""``.gguf`` files: the tokenizer and chat template embedded in the model file.

Byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) with the qwen2, llama-bpe or
tekken split rules are rebuilt here as a ``tokenizers`` object from the metadata: tokens, merges, the
split regex named by ``tokenizer.ggml.pre``, and control/user-defined tokens as added tokens.
Every other vocabulary -- SentencePiece (``"llama"``: Gemma, Llama 2, Mistral v1-v3), other
split rules, Unigram -- goes through transformers' own GGUF tokenizer builders
(``transformers.integrations.gguf``), fed from metadata read with the ``gguf`` package (no torch).
The chat template comes from ``tokenizer.chat_template``; kinds neither knows raise a clear error.
"""

from __future__ import annotations

import contextlib
import gc
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from budgeter.errors import MissingExtra, TokenizerLoadError

_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's own rewrite of Tekken's split (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_TEKKEN), not the
# tokenizer.json's: its regex engine has no \p{Lu}/\p{Ll}, so "upper" is a letter other than a-z and
# "lower" a letter other than A-Z, and combining marks are not letters, so non-ASCII text splits
# differently from mistral-common's Tekken; budgeter counts it as the server does.
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE = {"qwen2": (_QWEN2, True), "llama-bpe": (_LLAMA3, False), "llama3": (_LLAMA3, False),
       "tekken": (_TEKKEN, False)}
_CONTROL, _USER_DEFINED = 3, 4


def gguf_value(reader: Any, key: str) -> Any:
    """A metadata field of a GGUFReader: a string, number, or list (always a list for tokens)."""
    field = reader.fields.get(key)
    if field is None:
        return None
    values = [field.parts[i] for i in field.data]
    decoded = [bytes(v).decode("utf-8") if v.dtype.kind == "u" and v.dtype.itemsize == 1 else v.item()
               for v in values]
    return decoded if len(field.data) > 1 or key.endswith(("tokens", "merges", "token_type")) else decoded[0]


def load_gguf(path: Path) -> tuple[Any, str | None, dict[str, str]]:
    """(tokenizers.Tokenizer, chat template or None, special-token variables), through the
    tokenizer cache: building a 262K-token SentencePiece vocabulary (reading its metadata with
    ``gguf``, transformers' converter) took seconds at every load (``bench_flat``, ready). Keyed
    by the hash of the file's metadata section (where the tokenizer and template are; the weights
    after it do not count), the versions of gguf, transformers and tokenizers, and this module's
    code; the stored tokenizer was checked, when built, to serialize exactly as the one built."""
    from budgeter.tokenizers import cache

    # (the digest is kept by the file's state: reading and hashing the metadata section of a
    # 262K-token vocabulary took 5% of a later load, ``bench_flat``, ready)
    digest = (cache.by_file_state("gguf-digest", path, lambda: metadata_digest(path))
              if cache.location() is not None else None)
    if digest is None:
        return _load_gguf(path)
    packed = cache.fetch("gguf", digest, [*_versions(), cache.source_digest(__file__)],
                         lambda: _pack(*_load_gguf(path)))
    return _unpack(packed)


def _load_gguf(path: Path) -> tuple[Any, str | None, dict[str, str]]:
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        if not MissingExtra.explains(exc, "gguf"):
            raise
        raise MissingExtra("a .gguf tokenizer", "gguf") from exc
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:
        raise TokenizerLoadError(f"{path} is not a readable GGUF file: {exc}") from exc
    model, pre = gguf_value(reader, "tokenizer.ggml.model"), gguf_value(reader, "tokenizer.ggml.pre")
    tokens = gguf_value(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise TokenizerLoadError(f"{path}: the GGUF file holds no tokenizer", metadata={"path": str(path)})
    if model == "gpt2" and pre in PRE:
        types = gguf_value(reader, "tokenizer.ggml.token_type")
        merges = gguf_value(reader, "tokenizer.ggml.merges")
        tok = _byte_level_bpe(tokens, types, merges, *PRE[pre])
    else:
        tok = _transformers_builder(reader, path)
    variables = {}
    for name in ("bos", "eos", "unk", "pad"):
        key = {"unk": "unknown", "pad": "padding"}.get(name, name)
        token_id = gguf_value(reader, f"tokenizer.ggml.{key}_token_id")
        if isinstance(token_id, int) and 0 <= token_id < len(tokens):
            variables[f"{name}_token"] = tokens[token_id]
    return tok, gguf_value(reader, "tokenizer.chat_template"), variables


def _transformers_builder(reader: Any, path: Path) -> Any:
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError as exc:
        if not MissingExtra.explains(exc, "gguf"):
            raise
        raise MissingExtra(f"{path.name} (a non-BPE GGUF tokenizer)", "gguf") from exc

    fields = {name: gguf_value(reader, f"tokenizer.{key}") for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()}
    fields = {k: v for k, v in fields.items() if v is not None}
    try:
        tok, _ = convert_gguf_tokenizer(gguf_value(reader, "general.architecture"), fields)
    except Exception as exc:
        raise TokenizerLoadError(
            f"{path}: GGUF tokenizer {fields.get('tokenizer_type')!r}/{fields.get('pre_tokenizer_type')!r} "
            f"is not supported: {exc}", metadata={"path": str(path)}) from exc
    if fields.get("tokenizer_type") == "llama" and fields.get("add_prefix_space", True):
        _space_prefix_per_piece(tok)
    return tok


def _space_prefix_per_piece(tok: Any) -> None:
    """SentencePiece with a dummy prefix, as llama.cpp (and sentencepiece itself, which mistral-common
    calls once per text piece) tokenizes it: every run of text between special tokens gets its own
    leading "▁", and leading spaces are kept. transformers' ``Metaspace(prepend_scheme="first")``
    prefixes only the start of the whole input and drops a leading space, so ``"</s>[INST] hi"``
    and ``" hi"`` count one token short. A normalizer runs per piece between added tokens, which is
    exactly llama.cpp's rule (llama-vocab.cpp: "prefix with space if previous is special")."""
    from tokenizers import normalizers

    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None


def _byte_level_bpe(tokens: list[str], types: list[int], merges: list[str], split: str, nfc: bool) -> Any:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    special = [(i, t) for i, (t, k) in enumerate(zip(tokens, types, strict=True))
               if k in (_CONTROL, _USER_DEFINED)]
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [(a, b) for a, _, b in (m.partition(" ") for m in merges)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=False))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for _, t in special])
    return tok


def _versions() -> list[str]:
    """What builds a GGUF tokenizer, for its cache key: gguf, transformers and tokenizers, each as
    its installed package's file with that file's size and modification time (any reinstall is
    another key). Their versions through ``importlib.metadata``, imported for them alone, took 2% of
    a later load (``bench_flat``, ready)."""
    import importlib.util
    import os

    found = []
    for name in ("gguf", "transformers", "tokenizers"):
        origin = getattr(importlib.util.find_spec(name), "origin", None)
        try:
            st = os.stat(origin) if origin else None
        except OSError:
            st = None
        found.append(f"{name} {origin}:{st.st_size}:{st.st_mtime_ns}" if st else f"{name} absent")
    return found


_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Bytes of each fixed-size GGUF value type (8 is a string, 9 an array)."""


def metadata_digest(path: Path) -> str | None:
    """The SHA-256 of a GGUF file's header and metadata (key-value) section, which hold its
    tokenizer and chat template; None when it is not a little-endian GGUF v2/v3 file read here
    (then nothing is cached)."""
    import hashlib
    import mmap

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return hashlib.sha256(m[:_metadata_end(m)]).hexdigest()
    except (OSError, ValueError, KeyError, IndexError, OverflowError, struct.error):
        return None


def _metadata_end(buf: Any) -> int:
    u32, u64 = struct.Struct("<I").unpack_from, struct.Struct("<Q").unpack_from
    if buf[:4] != b"GGUF" or u32(buf, 4)[0] not in (2, 3):
        raise ValueError("not a little-endian GGUF v2/v3 file")
    off = 24
    for _ in range(u64(buf, 16)[0]):
        off += 8 + u64(buf, off)[0]
        off = _skip_value(buf, off + 4, u32(buf, off)[0], u32, u64)
    if off > len(buf):
        raise ValueError("truncated GGUF metadata")
    return off


def _skip_value(buf: Any, off: int, kind: int, u32: Any, u64: Any) -> int:
    if kind == 8:
        return off + 8 + int(u64(buf, off)[0])
    if kind != 9:
        return off + _SIZES[kind]
    item, count = u32(buf, off)[0], u64(buf, off + 4)[0]
    off += 12
    if item == 8:
        for _ in range(count):
            off += 8 + u64(buf, off)[0]
        return off
    if item == 9:
        for _ in range(count):
            off = _skip_value(buf, off, 9, u32, u64)
        return off
    return off + count * _SIZES[item]


_SEP = "\x00"
"""Joins the vocabulary's and the merges' texts in a cache entry: one string splits into a million
in a fraction of the time ``marshal`` takes to read them one by one (``bench_flat``, ready)."""


def _pack(tok: Any, template: str | None, variables: dict[str, str]) -> tuple[Any, ...]:
    """``load_gguf``'s result as a cache value. A BPE tokenizer is kept as its JSON without the
    vocabulary, merges and added tokens, plus those as plain strings and lists, which ``tokenizers`` builds in
    about half the time it parses them from JSON (``bench_flat``, ready); kept so only when the
    tokenizer made back from it serializes exactly as ``tok`` does, else as ``tok``'s JSON."""
    import json

    source = tok.to_str()
    state = json.loads(source)
    model = state["model"]
    merges = model.get("merges")
    if model.get("type") == "BPE" and isinstance(merges, list) and all(isinstance(m, list) for m in merges):
        options = {k: v for k, v in model.items() if k not in ("type", "vocab", "merges") and v is not None}
        skeleton = json.dumps({**state, "added_tokens": [], "model": {**model, "vocab": {}, "merges": []}},
                              ensure_ascii=False)
        added = [(a["content"], a["single_word"], a["lstrip"], a["rstrip"], a["normalized"], a["special"])
                 for a in state["added_tokens"]]
        vocab = model["vocab"]
        if not any(_SEP in t for t in vocab):
            ids = list(vocab.values())
            packed = ("bpe", skeleton, _SEP.join(vocab), len(ids) if ids == list(range(len(ids))) else ids,
                      _SEP.join(p for m in merges for p in m), options, added, template, variables)
            if _unpack(packed)[0].to_str() == source:
                return packed
    return ("json", source, template, variables)


def _unpack(packed: tuple[Any, ...]) -> tuple[Any, str | None, dict[str, str]]:
    from tokenizers import AddedToken, Tokenizer, models

    if packed[0] == "bpe":
        _, skeleton, tokens, ids, joined, options, added, template, variables = packed
        tok = Tokenizer.from_str(skeleton)
        with _no_gc():  # (pairs taken from one iterator: no two half-million-item slices copied first)
            parts = iter(joined.split(_SEP) if joined else ())
            ids = range(ids) if isinstance(ids, int) else ids  # (ids in order are kept as their count)
            tok.model = models.BPE(vocab=dict(zip(tokens.split(_SEP), ids, strict=True)),
                                   merges=list(zip(parts, parts, strict=True)), **options)
        # added after the model, as the JSON loader adds them: an added token whose text is also
        # a vocabulary entry takes that entry's id
        tok.add_tokens([AddedToken(content, single_word=single_word, lstrip=lstrip, rstrip=rstrip,
                                   normalized=normalized, special=special)
                        for content, single_word, lstrip, rstrip, normalized, special in added])
        return tok, template, variables
    _, source, template, variables = packed
    return Tokenizer.from_str(source), template, variables


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The garbage collector paused while half a million merge pairs are made, handed over and
    freed: each allocation burst otherwise sets off collections that walk them all again, tripling
    the time, and the first collection after a pause that ends while they live walks them once more
    (``bench_flat``, ready)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
