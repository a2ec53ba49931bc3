"""``.gguf`` files: the tokenizer and chat template embedded in the model file.

Byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) are rebuilt as a ``tokenizers``
object from the metadata: tokens, merges, the split regex named by ``tokenizer.ggml.pre``, and
control/user-defined tokens as added tokens. The chat template comes from
``tokenizer.chat_template``. Other vocabulary kinds raise a clear error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgeter.errors import TokenizerLoadError

_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE = {"qwen2": (_QWEN2, True), "llama-bpe": (_LLAMA3, False), "llama3": (_LLAMA3, False)}
_CONTROL, _USER_DEFINED = 3, 4


def _value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    values = [field.parts[i] for i in field.data]
    decoded = [bytes(v).decode("utf-8") if v.dtype.kind == "u" and v.dtype.itemsize == 1 else v.item()
               for v in values]
    return decoded if len(field.data) > 1 or key.endswith(("tokens", "merges", "token_type")) else decoded[0]


def load_gguf(path: Path) -> tuple[Any, str | None, dict[str, str]]:
    """(tokenizers.Tokenizer, chat template or None, special-token variables)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:
        raise TokenizerLoadError(f"{path} is not a readable GGUF file: {exc}") from exc
    model, pre = _value(reader, "tokenizer.ggml.model"), _value(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre not in PRE:
        raise TokenizerLoadError(
            f"{path}: GGUF tokenizer {model!r}/{pre!r} is not supported; supported: gpt2 with "
            f"{', '.join(PRE)}", metadata={"path": str(path)})
    tokens = _value(reader, "tokenizer.ggml.tokens")
    types = _value(reader, "tokenizer.ggml.token_type")
    merges = _value(reader, "tokenizer.ggml.merges")
    tok = _byte_level_bpe(tokens, types, merges, *PRE[pre])
    variables = {}
    for name in ("bos", "eos"):
        token_id = _value(reader, f"tokenizer.ggml.{name}_token_id")
        if isinstance(token_id, int) and 0 <= token_id < len(tokens):
            variables[f"{name}_token"] = tokens[token_id]
    return tok, _value(reader, "tokenizer.chat_template"), variables


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
