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
    """(tokenizers.Tokenizer, chat template or None, special-token variables)."""
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
