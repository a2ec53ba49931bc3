"""Each built-in renders its model's published template exactly as transformers does, and counts
the same ids as a transformers tokenizer built from the same vocabulary."""

import pytest

from budgeter.core.messages import to_template
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import template_text
from budgeter.tokenizers.registry import BUILTINS
from budgeter.tokenizers.servers import variables
from tests.tokenizers.agent_sessions import session
from tests.tokenizers.builtin_vocab import hf_tokenizer

TEMPLATED = ["qwen3.6", "qwen2.5"]


def test_every_templated_builtin_is_covered():
    assert {n for n, b in BUILTINS.items() if "published chat template" in b.template} == set(TEMPLATED)


@pytest.mark.parametrize("server", ["llama.cpp", "vllm"])
@pytest.mark.parametrize("name", TEMPLATED)
def test_render_equals_transformers_byte_for_byte(name, server):
    hf = hf_tokenizer(name)
    counter = resolve(f"{name}@{server}")
    messages, tools = session(3, chars=24_000)
    for end in (3, 9, len(messages)):
        part = messages[:end]
        expected = hf.apply_chat_template([to_template(m) for m in part], tools=tools,
                                          chat_template=template_text(name), add_generation_prompt=True,
                                          tokenize=False, **variables(server))
        assert counter.render(part, tools) == expected
    ids = hf(expected, add_special_tokens=False)["input_ids"]
    assert counter.count_prompt(messages, tools) == len(ids)
    assert counter.pieces.tokenizer.encode_full(expected) == ids


def test_qwen36_server_conventions_differ_only_in_earlier_reasoning():
    """llama.cpp keeps every turn's think block (preserve_reasoning on by default); vLLM and
    transformers drop those before the last user query. Both counts are exact for their server."""
    messages, tools = session(3, chars=24_000)
    llama, vllm = resolve("qwen3.6@llama.cpp"), resolve("qwen3.6@vllm")
    a, b = llama.render(messages, tools), vllm.render(messages, tools)
    assert "<think>\nI should read the config" in a and "I should read the config" not in b
    assert a.count("<think>") > b.count("<think>")
    assert llama.count_prompt(messages, tools) > vllm.count_prompt(messages, tools)


def test_qwen36_writes_calls_as_function_elements_with_raw_strings():
    counter = resolve("qwen3.6")
    messages, tools = session(3, chars=8_000)
    text = counter.render(messages, tools)
    assert text.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following functions:")
    assert "<function=edit_file>\n<parameter=path>\nREADME.md\n</parameter>" in text
    assert '<parameter=old_string>\nsay "hi"\n\tthen\n</parameter>' in text  # raw, not JSON-escaped
    assert "<tool_call>\n{" not in text and '"arguments"' not in text
    assert "Qwen3.6 published chat template" in " ".join(counter.notes)


def test_chatml_stays_available_by_name():
    counter = resolve("qwen3.6", chat_format="chatml")
    messages, tools = session(3, chars=8_000)
    assert '{"name": "edit_file", "arguments": ' in counter.render(messages, tools)
    assert any("chatml" in n for n in counter.notes)


def test_gemma3_template_equals_transformers_on_the_merged_rewrite(tiny_bpe_path, tmp_path):
    """The carried Gemma 3 template, rendered by budgeter (with the merged-role rewrite it counts)
    and by transformers' apply_chat_template on the same rewritten messages: byte for byte."""
    import json
    import shutil

    from transformers import PreTrainedTokenizerFast

    shutil.copy(tiny_bpe_path, tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    # transformers' convention: a part that ends with the assistant's message opens a new turn
    # (llama.cpp's server takes it as a prefill)
    counter = resolve(str(tmp_path), chat_format="gemma3", server="transformers")
    hf = PreTrainedTokenizerFast(tokenizer_file=tiny_bpe_path, bos_token="<bos>", eos_token="<eos>")
    messages, tools = session(3, chars=12_000)
    for end in (4, 11, len(messages)):
        part = messages[:end]
        dicts, schemas = counter.adapter([to_template(m) for m in part], tools)
        expected = hf.apply_chat_template(dicts, tools=list(schemas) or None, chat_template=template_text("gemma3"),
                                          add_generation_prompt=True, tokenize=False)
        assert expected.startswith("<bos><start_of_turn>user\n")
        assert counter.render(part, tools) == expected


def test_qwen25_builtin_has_the_published_added_tokens(qwen3_path):
    """Same ids as the published Qwen tokenizer (Qwen3 = Qwen2.5 + 4 added tokens) on text without
    those 4, <tool_call> included as one token."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(f"{qwen3_path}/tokenizer.json")
    tok = resolve("qwen2.5").pieces.tokenizer
    messages, tools = session(3, chars=12_000)
    text = resolve("qwen2.5").render(messages, tools)
    assert "<tool_call>" in text and "<tool_response>" in text
    text = text.replace("<tool_response>", "").replace("</tool_response>", "")
    assert tok.encode_full(text) == hf.encode(text, add_special_tokens=False).ids
