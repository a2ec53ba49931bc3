"""``.gguf`` files: the tokenizer and chat template embedded in the model file.

The vocabulary is converted by transformers' GGUF support into a ``tokenizers`` object; the chat
template is read from the ``tokenizer.chat_template`` metadata key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgeter.errors import TokenizerLoadError


def _field_text(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def load_gguf(path: Path) -> tuple[Any, str | None, dict[str, str]]:
    """(tokenizers.Tokenizer, chat template or None, special-token variables)."""
    try:
        from gguf import GGUFReader
        from transformers import AutoTokenizer

        reader = GGUFReader(str(path))
        template = _field_text(reader, "tokenizer.chat_template")
        fast = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:
        raise TokenizerLoadError(f"cannot load the tokenizer embedded in {path}: {exc}",
                                 metadata={"path": str(path)}) from exc
    variables = {k: v for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                 if isinstance(v := getattr(fast, k, None), str)}
    return fast.backend_tokenizer, template, variables
