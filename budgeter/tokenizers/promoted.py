"""Ordinary vocabulary entries that llama.cpp's loader makes special, by their text.

llama.cpp (b11434, ``llama_vocab::impl::load`` in ``src/llama-vocab.cpp``) finds end-of-generation,
end-of-turn and fill-in-the-middle tokens by their text and gives each one it finds the CONTROL
attribute when it lacks it ("control-looking token ... was not control-type", its load log says).
A CONTROL token is then matched in a prompt as one token, where a Hugging Face tokenizer or
tiktoken, for which the entry is ordinary, splits its text into several: ``</s>`` is an ordinary
entry of the Qwen2.5 and Qwen3 vocabularies (one token on llama-server, three in Hugging Face).
``promoted`` applies the same rule to a vocabulary:
- every entry whose text is one of ``EOG`` (the end-of-generation list, always marked);
- of each ``FIRST_OF`` group (end-of-turn, end-of-message, each fill-in-the-middle role), the
  entries of the group when none of its texts is already an added token (llama.cpp marks the first
  one it meets in a hash map's order while the role has no id, so where a group has an added token
  and an ordinary entry too, which one it marks is not known here; none of the built-in profiles
  or shared folders has such a group);
- ``</s>`` is not marked where ``<|tool_response>`` or ``<|plamo:eos|>`` is (Gemma 4, PLaMo).
A vocabulary's entries are compared as a GGUF stores them (GPT-2's byte alphabet for byte-level
BPE, which leaves printable ASCII as it is), as llama.cpp compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

EOG = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
       "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
       "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
       "<｜end▁of▁sentence｜>", "[e~[")
FIRST_OF = (
    ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
     "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    ("<|eom_id|>",),
    ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
     "<|prefix|>"),
    ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
     "<|suffix|>"),
    ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
     "<|middle|>"),
    ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    ("<|file_sep|>",),
)
USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
"""gpt-oss's tokens, which llama.cpp makes USER_DEFINED (matched as one token too)."""
NORMAL_S_MARKERS = ("<|tool_response>", "<|plamo:eos|>")


def promoted(has: Callable[[str], bool], added: Collection[str]) -> list[str]:
    """The texts of the ordinary entries llama.cpp matches as one token. ``has``: whether the
    vocabulary has an ordinary entry stored as this text; ``added``: its added tokens' texts."""
    def present(text: str) -> bool:
        return text in added or has(text)

    found = {t for t in (*EOG, *USER_DEFINED) if t not in added and has(t)}
    for group in FIRST_OF:
        if not any(t in added for t in group):
            found.update(t for t in group if has(t))
    if any(present(m) for m in NORMAL_S_MARKERS):
        found.discard("</s>")
    return sorted(found)
