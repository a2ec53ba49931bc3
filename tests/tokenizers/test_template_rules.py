"""Templates that are not additive or not pure are detected at load, reported, and never
under-counted. Published templates come from llama.cpp's models/templates (in the sdist that
.ci/build-llama-server keeps); tests needing one skip where it is absent."""

from __future__ import annotations

import datetime

import pytest

from budgeter.core.engine import trim
from budgeter.core.messages import from_openai_list, to_openai
from budgeter.core.policy import Policy
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import JinjaFormat
from budgeter.tokenizers.rules import detect
from tests import llamacpp
from tests.tokenizers.agent_sessions import session


def _template(tmp_path, filename):
    text = llamacpp.published_template(filename)
    if text is None:
        pytest.skip(f"llama.cpp sdist with models/templates/{filename} not cached ({llamacpp.skip_reason()})")
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    return path


def _notes(counter) -> str:
    return " ".join(counter.notes)


def test_qwen36_is_additive_on_llama_cpp_and_drops_reasoning_elsewhere(qwen3_path):
    assert "drops earlier reasoning" not in _notes(resolve("qwen3.6"))
    assert "drops earlier reasoning" in _notes(resolve("qwen3.6@vllm"))
    assert "drops earlier reasoning" in _notes(resolve(qwen3_path))  # Qwen3: always


@pytest.mark.parametrize(("filename", "expected"), [
    ("openai-gpt-oss-120b.jinja", dict(drops_reasoning=True, single_call=True, reads_date=True,
                                       thinking_field=True)),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", dict(single_call=True)),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", dict(single_call=True, reads_date=True)),
    ("Qwen-Qwen3-0.6B.jinja", dict(drops_reasoning=True)),
    ("Qwen3.5-4B.jinja", dict(drops_reasoning=True)),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", dict()),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", dict(nine_char_ids=True, answer_before_user=True)),
])
def test_rules_detected_on_published_templates(tmp_path, filename, expected):
    fmt = JinjaFormat(_template(tmp_path, filename).read_text(), name=filename,
                      variables={"bos_token": "<s>", "eos_token": "</s>"})
    found = detect(fmt)
    for rule in ("drops_reasoning", "single_call", "reads_date", "thinking_field", "nine_char_ids",
                 "answer_before_user"):
        assert getattr(found, rule) == expected.get(rule, False), rule


def test_mistral_nemo_gets_nine_character_ids_and_an_answer_before_the_user(tmp_path, qwen3_path):
    """Mistral Nemo's published template raises on call ids that are not 9 alphanumeric characters
    and on a user turn right after tool results (its alternation check skips calls and results).
    budgeter counts and sends the ids mapped (the same id to the same one, a call and its result
    alike) and an empty assistant message there, so calls and results stay in the model's own
    [TOOL_CALLS]/[TOOL_RESULTS] format instead of falling back to text."""
    from budgeter.core.counting import sent
    from budgeter.tokenizers.mistral import mistral_id

    counter = resolve(qwen3_path, chat_format=str(_template(tmp_path, "mistralai-Mistral-Nemo-Instruct-2407.jinja")))
    notes = _notes(counter)
    assert "9 alphanumeric" in notes and "empty assistant message" in notes and "<tool_call> text" not in notes
    messages, tools = session(4, chars=4_000)
    text = counter.render(messages, tools)
    ids = {c.id for m in messages for c in m.tool_calls}
    assert text.count("[TOOL_CALLS]") == sum(1 for m in messages if m.tool_calls)
    assert text.count("[TOOL_RESULTS]") == sum(1 for m in messages if m.role == "tool")
    assert all(f'"id": "{mistral_id(i)}"' in text and f'"call_id": "{mistral_id(i)}"' in text for i in ids)
    body, _ = sent(counter, messages, tools)
    assert {c["id"] for m in body for c in m.get("tool_calls", ())} == {mistral_id(i) for i in ids}
    roles = [m["role"] for m in body]
    assert ("tool", "user") not in set(zip(roles, roles[1:], strict=False))
    assert {"role": "assistant", "content": ""} in body


def test_gpt_oss_counts_every_call_and_the_reasoning_llama_cpp_renders(tmp_path, qwen3_path):
    counter = resolve(qwen3_path, chat_format=str(_template(tmp_path, "openai-gpt-oss-120b.jinja")))
    notes = _notes(counter)
    for rule in ("one tool call per message", "reads the date", "message.thinking", "drops earlier reasoning"):
        assert rule in notes
    messages, tools = session(2, chars=10_000)
    text = counter.render(messages, tools)
    assert "edit_file" in text and '"old_string"' in text  # the second parallel call, as text
    assert "<|channel|>analysis<|message|>" in counter.render(messages[:8], tools)  # reasoning via thinking
    dropped = from_openai_list([{**to_openai(m), "tool_calls": [c for c in to_openai(m)["tool_calls"][:1]]}
                                if m.tool_calls else to_openai(m) for m in messages])
    assert counter.count_prompt(messages, tools) > counter.count_prompt(dropped, tools)


def test_llama32_counts_with_todays_date(tmp_path, llama3_path):
    counter = resolve(llama3_path, chat_format=str(_template(tmp_path, "meta-llama-Llama-3.2-3B-Instruct.jinja")))
    messages, tools = session(2, chars=4_000)
    today = datetime.datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {today}" in counter.render(messages, tools)
    assert "reads the date" in _notes(counter)


def test_llama31_published_template_equals_llama_server(tmp_path, llama3_path):
    """Llama 3.1's own template (tools in the first user turn, one call per message): equal to
    llama-server on single-call sessions before and after compaction; a parallel call is refused
    by the server (HTTP 400) and counted by budgeter with the extra call as text."""
    llamacpp.require_server()
    template = _template(tmp_path, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    counter = resolve(llama3_path, chat_format=str(template))
    assert "reads the date" in _notes(counter)  # llama.cpp passes date_string; the template prints it
    messages, tools = session(1, chars=20_000)
    single = [m for m in messages if len(m.tool_calls) < 2 and m.tool_call_id not in ("call_x1", "call_x2")]
    result = trim(single, counter=counter, tools=tools, policy=Policy(window=5000, reserve=500))
    assert result.compacted
    model = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(llama3_path), tmp_path / "l3.gguf")
    with llamacpp.serve(model, chat_template_file=template) as url:
        for prompt in (single, list(result.messages)):
            body = [to_openai(m) for m in prompt]
            text = llamacpp.apply_template(url, body, tools)
            assert counter.render(prompt, tools) in (text, "<|begin_of_text|>" + text)
            assert counter.count_prompt(prompt, tools) == llamacpp.chat_prompt_tokens(url, body, tools)
        with pytest.raises(llamacpp.ServerError) as refused:
            llamacpp.chat_prompt_tokens(url, [to_openai(m) for m in messages], tools)
        assert refused.value.status == 400
    assert counter.count_prompt(messages, tools) > counter.count_prompt(single, tools)


def test_tojson_memo_answers_only_for_the_same_object():
    """``tojson`` answers a container it serialized before from a memo: the same text for the same
    object, and a new object (even with the same shape) serialized afresh."""
    fmt = JinjaFormat("{{ tools | tojson }}|{{ messages[0].content }}", name="probe")
    user = [{"role": "user", "content": "q"}]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    first = fmt.render(user, tools, add_generation_prompt=False)
    assert fmt.render(user, tools, add_generation_prompt=False) == first
    indented = JinjaFormat("{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ tools | tojson }}", name="probe")
    plain, wide, again = indented.render(user, tools, add_generation_prompt=False).split("|")
    assert plain == again == first.split("|")[0] and wide != plain and "\n  " in wide  # options memoized apart
    other = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]
    assert "write_file" in fmt.render(user, other, add_generation_prompt=False)
    for _ in range(200):  # freed lists whose ids come back are never mistaken for ``tools``
        fresh = [{"type": "function", "function": {"name": f"t{_}"}}]
        assert f'"t{_}"' in fmt.render(user, fresh, add_generation_prompt=False)
    assert fmt.render(user, tools, add_generation_prompt=False) == first
