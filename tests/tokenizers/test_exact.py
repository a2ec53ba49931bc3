"""Sum of cached parts == full render, on real tokenizers (the proof behind exact counting)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core.counting import sent
from budgeter.core.messages import Message, ToolCall, from_openai_list
from budgeter.errors import InvalidTokenizerSpec, UnknownTokenizer
from budgeter.tokenizers import resolve
from budgeter.tokenizers.mistral import MistralCounter, _request_dict
from tests.bench.bench_service import fresh_count
from tests.bench.sessions import make_session


def _body(seed=5, chars=60_000):
    body = make_session(seed, chars=chars)
    body["messages"][2:2] = [{"role": "assistant", "content": "<think>\nplan 计划 🎯\n</think>\n\nOK"},
                             {"role": "user", "content": "  spaces  and\ttabs\n\n<|im_start|>? 你好"}]
    return from_openai_list(body["messages"]), body["tools"]


def _check_template_counter(counter, messages, tools):
    for end in (4, 9, 17, len(messages)):
        part = messages[:end]
        fresh = fresh_count(counter, part, tools)
        assert counter.count_prompt(part, tools) == fresh


@pytest.mark.parametrize("spec", ["qwen3.6", "qwen2.5"])
def test_builtin_qwen_sum_of_parts_equals_full_render(spec):
    messages, tools = _body()
    _check_template_counter(resolve(spec), messages, tools)


def test_shared_qwen3_sum_of_parts_equals_full_render(qwen3_path):
    messages, tools = _body()
    _check_template_counter(resolve(qwen3_path), messages, tools)


def test_shared_llama3_sum_of_parts_equals_full_render(llama3_path):
    messages, tools = _body()
    counter = resolve(llama3_path)
    _check_template_counter(counter, messages, tools)
    assert any("tool calls" in n for n in counter.notes)  # fallback reported, not silent


def test_qwen3_matches_transformers_apply_chat_template(qwen3_path):
    """Same number as the inference-server path: transformers renders + tokenizes itself."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(qwen3_path)
    messages, tools = _body(seed=9, chars=40_000)
    counter = resolve(qwen3_path)
    from budgeter.core.messages import to_template

    dicts = [to_template(m) for m in messages]
    ids = hf.apply_chat_template(dicts, tools=tools, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert counter.count_prompt(messages, tools) == len(ids)


def test_llama3_fallback_never_undercounts(llama3_path):
    """The server-side template would drop tool calls; our count includes them."""
    messages, tools = _body(seed=2, chars=20_000)
    counter = resolve(llama3_path)
    from budgeter.core.messages import to_template

    plain = counter.format.render([to_template(m) for m in messages], tools, add_generation_prompt=True)
    dropped = len(counter.pieces.tokenizer.encode_full(plain))
    assert counter.count_prompt(messages, tools) > dropped


_MISTRAL: list = []


def _mistral_turns(seed: int, chars: int):
    """A generated session without reasoning (Tekken V3 has no place for it), its tools, and the
    ends of its turns (a build before each model turn: the prefixes not ending with the assistant)."""
    messages, tools = _body(seed=seed, chars=chars)
    messages = [m for m in messages if "<think>" not in m.content]
    return messages, tools, [i for i in range(2, len(messages) + 1) if messages[i - 1].role != "assistant"]


def _tekken():
    """A new MistralTokenizer (Tekken V3) of mistral-common's own."""
    from importlib import resources

    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(str(resources.files("mistral_common") / "data" / "tekken_240911.json"))


def _own_tekken():
    """The one Tekken tokenizer the tests leave untouched by budgeter (mistral-common's own answers)."""
    if not _MISTRAL:
        _MISTRAL.append(_tekken())
    return _MISTRAL[0]


def _mistral_own(messages, tools) -> int:
    """mistral-common's own count of the request: a tokenizer of its own, untouched by budgeter."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    from budgeter.tokenizers.mistral import _request_dict

    request = ChatCompletionRequest.from_openai([_request_dict(m) for m in messages], list(tools) or None)
    return len(_own_tekken().encode_chat_completion(request).tokens)


def test_mistral_memoized_walk_equals_mistral_common():
    counter = resolve("mistral-tekken")
    messages, tools = _body(seed=4, chars=40_000)
    messages = [m for m in messages if "<think>" not in m.content]
    for end in (5, 12, len(messages)):
        part = messages[:end]
        while part[-1].role == "assistant":
            part = part[:-1]
        assert counter.count_prompt(part, tools) == _mistral_own(part, tools)


def test_a_tokenizer_without_a_template_is_refused_unless_a_format_is_named(tiny_bpe_path, tmp_path):
    """A bare tokenizer.json, a folder and a GGUF without a chat template are never counted with
    a guessed format: loading says to name one with --chat-format (and which names there are)."""
    from budgeter.errors import NoChatTemplate
    from tests import llamacpp

    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "tokenizer.json").write_bytes(Path(tiny_bpe_path).read_bytes())
    gguf = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(tiny_bpe_path, pre="qwen2"), tmp_path / "bare.gguf")
    for spec in (tiny_bpe_path, str(tmp_path / "folder"), str(gguf)):
        with pytest.raises(NoChatTemplate) as err:
            resolve(spec)
        assert "--chat-format (chatml, qwen3.6, qwen2.5, gemma3, or a .jinja file)" in err.value.message
        assert resolve(spec, chat_format="chatml").count_prompt(*_body(seed=1, chars=2_000)) > 0


def test_names_are_checked_before_anything_loads():
    """An unknown format is reported with every known name, before the (missing) tokenizer path
    is even looked at; an unknown server suffix is an unknown server, not a missing path."""
    with pytest.raises(InvalidTokenizerSpec) as err:
        resolve("/no/such/model.gguf", chat_format="chatmll")
    assert err.value.field == "chat_format"
    assert "known: chatml, qwen3.6, qwen2.5, gemma3, or a .jinja file" in err.value.message
    with pytest.raises(InvalidTokenizerSpec, match="chat format file /no/such.jinja does not exist"):
        resolve("/no/such/model.gguf", chat_format="/no/such.jinja")
    with pytest.raises(InvalidTokenizerSpec) as err:
        resolve("qwen3.6@nosuchserver")
    assert err.value.message == "unknown server 'nosuchserver'; known: llama.cpp, vllm, transformers"


def test_tiny_bpe_with_the_chatml_format(tiny_bpe_path):
    counter = resolve(tiny_bpe_path, chat_format="chatml")
    assert any("chatml" in n for n in counter.notes)
    messages, tools = _body(seed=1, chars=8_000)
    _check_template_counter(counter, messages, tools)


def test_only_new_pieces_are_tokenized(qwen3_path):
    counter = resolve(qwen3_path)
    messages, tools = _body(seed=11, chars=80_000)
    counter.count_prompt(messages, tools)
    before = counter.pieces.chars_tokenized
    extra = from_openai_list([{"role": "user", "content": "one more short question"}])
    counter.count_prompt([*messages, *extra], tools)
    assert counter.pieces.chars_tokenized - before < 200


def test_unknown_tokenizer_lists_builtins():
    with pytest.raises(UnknownTokenizer) as err:
        resolve("no-such-model")
    assert "qwen3.6" in err.value.metadata["available"]


def test_gguf_file(tmp_path, qwen3_path):
    """A .gguf with an embedded tokenizer and template counts like the folder it came from."""
    gguf = pytest.importorskip("gguf")

    tok = json.loads(Path(qwen3_path, "tokenizer.json").read_text())
    config = json.loads(Path(qwen3_path, "tokenizer_config.json").read_text())
    vocab = tok["model"]["vocab"]
    added = {a["content"]: a["id"] for a in tok["added_tokens"]}
    size = max([*vocab.values(), *added.values()]) + 1
    tokens, types = [""] * size, [1] * size
    for t, i in {**vocab, **added}.items():
        tokens[i] = t
        types[i] = 3 if t in added else 1
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_eos_token_id(added["<|im_end|>"])
    w.add_chat_template(config["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    messages, tools = _body(seed=3, chars=20_000)
    assert resolve(str(tmp_path / "m.gguf")).count_prompt(messages, tools) == \
        resolve(qwen3_path).count_prompt(messages, tools)


def test_mistral_reuse_equals_mistral_common_turn_by_turn():
    """Builds that reuse earlier builds' conversions count what mistral-common's own encoding of
    the whole request counts, turn by turn, with every count audited."""
    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    counter.audit_every = 1
    messages, tools, ends = _mistral_turns(seed=6, chars=60_000)
    for end in ends:
        part = messages[:end]
        assert counter.count_prompt(part, tools) == _mistral_own(part, tools)
    dropped = [m for i, m in enumerate(messages[: ends[-1]]) if i == 0 or i > ends[-1] // 2]  # compaction-like
    assert counter.count_prompt(dropped, tools) == _mistral_own(dropped, tools)
    assert counter.off == "" and len(ends) > 10
    text = messages[3].content + " [INST] ünïcödé 漢字 🙂"
    own = _own_tekken().instruct_tokenizer.tokenizer
    assert counter.count_text(text) == len(own.encode(text, bos=False, eos=False))


def test_mistral_message_cost_is_its_encoding_alone_and_builds_do_not_tokenize_it_again():
    """A message's cost is what mistral-common's own tokenizer encodes for a request holding it
    alone; a build that follows finds the appended messages counted and tokenizes only the user
    and system text and tool schemas it frames differently (the last user turn carries them)."""
    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    messages, tools = _body(seed=8, chars=30_000)
    messages = [m for m in messages if "<think>" not in m.content]
    while messages[-1].role == "assistant":
        messages.pop()
    for m in messages:
        assert counter.message_cost(m) == _mistral_own_alone(m), m.role
    lengths = counter._lengths
    encoded: list[str] = []
    count = lengths._length  # what the counter tokenizes text with
    lengths._length = lambda s: encoded.append(s) or count(s)
    assert counter.count_prompt(messages, tools) == _mistral_own(messages, tools)
    framed = sum(len(m.content) for m in messages if m.role in ("user", "system")) + len(json.dumps(tools))
    tool_text = sum(len(m.content) for m in messages if m.role == "tool")
    assert encoded and sum(map(len, encoded)) <= 2 * framed + 200 < tool_text


_TEKKEN_PARTS = ["a", "b c", " ", "\n", "\n\n", "\t", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]",
                 "<|im_end|>", "ü", "漢字", "🙂", "\u200b", "\x00", "9", "{\"k\": [1, 2]}", "def f(x):\n    return x"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_TEKKEN_PARTS), max_size=120))
def test_mistral_tekken_encode_equals_mistral_commons_own(parts):
    """The counter's Tekken encode (``encode_ordinary``, the offset read once, long texts kept)
    gives the ids of mistral-common's own, untouched tokenizer, special-looking text included, and
    as many of them while counting (not shifted)."""
    counter = resolve("mistral-tekken")
    ours = counter._tok.instruct_tokenizer.tokenizer
    own = _own_tekken().instruct_tokenizer.tokenizer
    text = "".join(parts)
    for s in (text, text * 8):  # the second is long enough to be kept, and is asked for twice
        assert counter._lengths._length(s) == len(own.encode(s, bos=False, eos=False))
        for bos, eos in ((False, False), (True, True), (False, False)):
            assert ours.encode(s, bos=bos, eos=eos) == own.encode(s, bos=bos, eos=eos)
        counter._lengths.counting = True  # as while counting: ids not shifted, as many
        try:
            assert len(ours.encode(s, bos=True, eos=True)) == len(own.encode(s, bos=True, eos=True))
        finally:
            counter._lengths.counting = False
        assert ours.encode(s, bos=False, eos=False) == own.encode(s, bos=False, eos=False)  # the kept ids unchanged


_CUT_PARTS = [*_TEKKEN_PARTS, "abc ", "x  y", " a", "\\n", "\\\"", "\"", "é ", "Ab ", "z\u00a0", "aé", "a\u0301 ",
              "  \n", "a\r\n", "1 ", "a/b ", "ABC d"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_CUT_PARTS), min_size=1, max_size=80))
def test_tekken_count_is_the_sum_of_its_parts_at_every_cut(parts):
    """Where a lowercase ASCII letter is followed by a space, Tekken's count of a text is the
    count of the text before plus the count of the text from there: at every such place of texts
    made of letters, spaces, newlines, quotes, escapes, digits, accents and other scripts."""
    import re

    own = _own_tekken().instruct_tokenizer.tokenizer._model
    text = "".join(parts)
    whole = len(own.encode_ordinary(text))
    for m in re.finditer("[a-z](?= )", text):
        cut = m.end()
        assert len(own.encode_ordinary(text[:cut])) + len(own.encode_ordinary(text[cut:])) == whole, cut


def test_tekken_payload_is_tokenized_once_under_any_envelope():
    """A long payload met again in another envelope (a retried call's arguments, the same text as
    a tool result under another call id) is counted from its kept count: only the envelope's head
    and tail are tokenized again, and each count equals mistral-common's own."""
    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    counter._lengths.audit_every = 1  # every split checked against the whole count too
    ours = counter._tok.instruct_tokenizer.tokenizer
    own = _own_tekken().instruct_tokenizer.tokenizer
    messages, _ = _body(seed=3, chars=40_000)
    payloads = [m.content for m in messages if m.role == "tool" and len(m.content) > 3000]
    assert len(payloads) >= 3
    model = ours._model
    encoded: list[str] = []
    encode = model.encode_ordinary
    model.encode_ordinary = lambda s: encoded.append(s) or encode(s)
    for payload in payloads:
        envelopes = [json.dumps({"content": payload, "call_id": f"id{k:07d}"}, ensure_ascii=False) for k in range(3)]
        envelopes.append(json.dumps([{"name": "write_file", "arguments": {"path": "a b.py", "content": payload},
                                       "id": "abcdefghi"}], ensure_ascii=False))
        for n, text in enumerate(envelopes):
            encoded.clear()
            counter._lengths.counting = True
            try:
                got = len(ours.encode(text, bos=False, eos=False))
            finally:
                counter._lengths.counting = False
            assert got == len(own.encode(text, bos=False, eos=False))
            if n:
                # the audit tokenizes the whole text once more; besides it, only head and tail
                assert sum(map(len, encoded)) - len(text) < 400, [len(s) for s in encoded]
    assert counter._lengths.off == ""


def test_tekken_audit_turns_splitting_off_on_a_difference():
    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    lengths = counter._lengths
    lengths.audit_every = 1
    payload = "the quick brown fox jumps over the lazy dog " * 60
    first = json.dumps({"content": payload, "call_id": "aaaaaaaaa"})
    second = json.dumps({"content": payload, "call_id": "bbbbbbbbb"})
    own = _own_tekken().instruct_tokenizer.tokenizer._model
    assert lengths.count(first) == len(own.encode_ordinary(first))
    cuts = lengths._payload(second)
    assert cuts is not None
    lengths._lengths[second[cuts[0]:cuts[1]]] += 1  # a payload's kept count gone wrong
    assert lengths.count(second) == len(own.encode_ordinary(second))
    assert lengths.off and any("tokenizing:" in n for n in counter.notes)
    third = json.dumps({"content": payload, "call_id": "ccccccccc"})
    assert lengths.count(third) == len(own.encode_ordinary(third))


def test_mistral_audit_turns_reuse_off_on_a_difference():
    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    messages, tools = _body(seed=7, chars=20_000)
    messages = [m for m in messages if "<think>" not in m.content]
    while messages[-1].role == "assistant":
        messages.pop()
    exact = _mistral_own(messages, tools)
    counter.count_prompt(messages, tools)
    memo = counter._same._items  # a cache gone wrong: every remembered count one too high
    memo.update({k: (objects, n + 1) for k, (objects, n) in memo.items()})
    for _, walk, _ in counter._counted_walks._items.values():  # and every remembered walk's sums
        walk.sums[:] = [n + 1 for n in walk.sums]
    counter.audit_every = 1
    assert counter.count_prompt(messages, tools) == exact
    assert counter.off and any("reuse is off" in n for n in counter.notes)
    assert counter.count_prompt(messages, tools) == exact


def test_mistral_checks_each_message_once_and_a_rejected_one_every_time():
    """mistral-common's check of each message by its role runs once per message across builds
    that reuse earlier ones (the list's structure is still checked whole); a message it rejects
    is rejected on every build, nothing about it kept."""
    from budgeter.errors import TemplateError
    from budgeter.tokenizers.mistral import mistral_id

    tok = _tekken()
    checked: list[str] = []
    validator = tok._chat_completion_request_validator
    check = validator._validate_tool_message
    validator._validate_tool_message = lambda m: checked.append(m.tool_call_id) or check(m)
    counter = MistralCounter(tok, name="mistral-tekken")
    counter.audit_every = 10**9  # reusing builds only (an audit converts afresh and checks all)
    messages, tools, ends = _mistral_turns(seed=6, chars=60_000)
    for end in ends:
        assert counter.count_prompt(messages[:end], tools) == _mistral_own(messages[:end], tools)
    answered = [mistral_id(m.tool_call_id or "") for m in messages[: ends[-1]] if m.role == "tool"]
    assert len(answered) > 10 and sorted(checked) == sorted(answered)  # each once, over all builds
    call = ToolCall(id="call_x", name="bad name!", arguments="{}")
    bad = [*messages[: ends[0]], Message(role="assistant", tool_calls=(call,)),
           Message(role="tool", tool_call_id="call_x", content="ok")]
    for _ in range(2):
        with pytest.raises(TemplateError, match="must be a-z"):
            counter.count_prompt(bad, tools)


def test_mistral_walk_resumes_where_the_conversation_changed():
    """A build that extends its conversation's previous one hands mistral-common's normalizer
    only the runs from the last shared one on; two conversations built in turn, a message changed
    in the middle, a tool result added to a run of them, and user messages merged all count what
    mistral-common's own encoding counts."""
    tok = _tekken()
    counter = MistralCounter(tok, name="mistral-tekken")
    counter.audit_every = 10**9  # reusing builds only
    normalizer = tok._instruct_request_normalizer
    runs: list[int] = []
    aggregate = normalizer._aggregate_role
    normalizer._aggregate_role = lambda ms, role, ids: runs.append(len(ms)) or aggregate(ms, role, ids)
    one, tools = _body(seed=6, chars=40_000)
    two, _ = _body(seed=8, chars=40_000)
    one = [m for m in one if "<think>" not in m.content]
    two = [m for m in two if "<think>" not in m.content]
    ends = [i for i in range(3, min(len(one), len(two)) + 1)
            if one[i - 1].role != "assistant" and two[i - 1].role != "assistant"]
    def run_start(messages, end):  # where the run of same-role messages holding messages[end - 1] starts
        i = end - 1
        while i > 0 and messages[i - 1].role == messages[end - 1].role:
            i -= 1
        return i

    for before, end in zip([0, *ends[:-1]], ends, strict=True):
        for messages in (one, two):
            runs.clear()
            assert counter.count_prompt(messages[:end], tools) == _mistral_own(messages[:end], tools)
            if before:  # the conversation's previous build was a prefix of this one
                assert sum(runs) == end - run_start(messages, before), (before, end, runs)
    end = ends[-1]
    middle = next(i for i in range(end // 2, end) if one[i].role == "tool")
    changed = [*one[:middle], Message(role="tool", tool_call_id=one[middle].tool_call_id, content="changed"),
               *one[middle + 1:end]]
    extra = Message(role="user", content="and one more thing")
    for messages in (changed, one[:end], [*one[:end], extra], [*one[:end], extra, Message(role="user", content="x")]):
        assert counter.count_prompt(messages, tools) == _mistral_own(messages, tools)
    assert counter.off == ""


def test_mistral_walk_reads_a_weight_only_where_a_message_can_carry_one():
    """The resumed normalizer walk skips ``getattr(message, "weight")`` for message classes that
    cannot hold one (mistral-common's own), and reads it for any class that can: a model with a
    ``weight`` field, a model that allows extra attributes, or a class that is not a model."""
    from mistral_common.protocol.instruct import messages as mm
    from pydantic import ConfigDict

    from budgeter.tokenizers.mistral import _weighted

    assert not any(_weighted(k) for k in (mm.UserMessage, mm.AssistantMessage, mm.ToolMessage, mm.SystemMessage))

    class Weighted(mm.AssistantMessage):
        weight: float | None = None

    class Extras(mm.UserMessage):
        model_config = ConfigDict(extra="allow")

    class Plain:
        role = "user"

    assert _weighted(Weighted) and _weighted(Extras) and _weighted(Plain)
    assert Weighted(content="a", weight=0.0).weight == 0.0


def test_mistral_new_user_turn_counts_only_its_own_messages():
    """Tekken V3's tool-result and assistant encoders ignore whether the message comes before the
    last user message (both flags encode alike), so a build after a new user message encodes no
    tool result or assistant message again, and counts what mistral-common's own encoding counts."""
    tok = _tekken()
    counter = MistralCounter(tok, name="mistral-tekken")
    counter.audit_every = 10**9  # reusing builds only
    it = tok.instruct_tokenizer
    messages, tools, _ = _mistral_turns(seed=6, chars=40_000)
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    assert len(users) >= 3
    assert counter.count_prompt(messages[:users[-1]], tools) == _mistral_own(messages[:users[-1]], tools)

    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    request = tok._instruct_request_normalizer.from_chat_completion_request(ChatCompletionRequest.from_openai(
        [_request_dict(m) for m in messages[:users[-1]]], list(tools)))
    encoded = 0
    for m in request.messages:
        if m.role == "tool":
            assert it.encode_tool_message(m, True) == it.encode_tool_message(m, False)
            encoded += 1
        elif m.role == "assistant":
            assert (it.encode_assistant_message(m, is_before_last_user_message=True)
                    == it.encode_assistant_message(m, is_before_last_user_message=False))
            encoded += 1
    assert encoded > 4

    calls: list[str] = []
    tool, assistant = it.encode_tool_message, it.encode_assistant_message
    it.encode_tool_message = lambda *a, **k: calls.append("tool") or tool(*a, **k)
    it.encode_assistant_message = lambda *a, **k: calls.append("assistant") or assistant(*a, **k)
    grown = messages[:users[-1] + 1]
    assert counter.count_prompt(grown, tools) == _mistral_own(grown, tools)
    assert calls == [], calls
    assert counter.off == ""


_TURNS = ["user", "user", "assistant", "call", "calls", "calls", "unanswered", "tool", "system"]


def _conversation(turns: list[str]) -> list[Message]:
    """Messages for turns of the given kinds: a user or system message, an assistant's text, an
    assistant's call(s) with their results, a call left unanswered, a stray tool result; mostly
    valid conversations, some not."""
    messages: list[Message] = []
    for n, kind in enumerate(turns):
        if kind in ("call", "calls", "unanswered"):
            ids = [f"call_{n}_{k}" for k in range(2 if kind == "calls" else 1)]
            calls = tuple(ToolCall(id=i, name="read_file", arguments=json.dumps({"path": f"f{n}.py"})) for i in ids)
            messages.append(Message(role="assistant", tool_calls=calls))
            if kind != "unanswered":
                messages += [Message(role="tool", tool_call_id=i, content=f"result {i}") for i in ids]
        elif kind == "tool":
            messages.append(Message(role="tool", tool_call_id=f"call_x{n}", content=f"result {n}"))
        else:
            messages.append(Message(role=kind, content=f"{kind} {n}"))
    return messages


def _outcome(count, messages, tools):
    try:
        return count(messages, tools)
    except Exception:  # budgeter's TemplateError, mistral-common's own exception
        return "rejected"


_RESUMING: list[MistralCounter] = []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_TURNS), min_size=1, max_size=10), st.integers(1, 3), st.booleans(),
       st.sets(st.integers(0, 24), max_size=4))
def test_mistral_resumed_checks_and_counts_agree_with_mistral_commons_own(turns, step, vary_tools, dropped):
    """Builds that extend earlier ones, cut them or drop messages from their middle (valid or not)
    check the list's structure from where it stops sharing messages with one that passed, and
    count from there: each build is accepted or rejected, and counted, as mistral-common's own
    tokenizer does the whole request."""
    if not _RESUMING:  # one for every example: equal messages of two examples convert to the same objects
        _RESUMING.append(MistralCounter.builtin("tekken_240911.json", name="mistral-tekken"))
        _RESUMING[0].audit_every = 10**9  # reusing builds only
    counter = _RESUMING[0]
    messages, tools = _conversation(turns), _body(seed=1, chars=1000)[1]
    ends = sorted({*range(step, len(messages), step), len(messages)})
    kept = [m for i, m in enumerate(messages) if i not in dropped]
    builds = [messages[:end] for end in [*ends, *reversed(ends)]]  # each extends the one before, then cuts it
    for n, part in enumerate([*builds, kept, messages]):
        given_tools = tools[: 1 + n % 2] if vary_tools else tools
        if not part or part[-1].role == "assistant":
            continue
        for m in part[-step:]:  # priced alone first, as a session's append does
            own = _outcome(lambda m, _: _mistral_own_alone(m), m, None)
            assert own == "rejected" or counter.message_cost(m) == own, m
        # as mistral-common's own counts the request budgeter sends (a system message right after a
        # reply moved to a user turn: mistral-common refuses it where it stands)
        wire = sent(counter, part, given_tools)
        sent_part = from_openai_list(wire[0]) if wire is not None else part
        assert _outcome(counter.count_prompt, part, given_tools) == _outcome(_mistral_own, sent_part, given_tools), \
            len(part)


def test_mistral_builds_check_and_count_only_what_follows_the_shared_messages():
    """A build that extends its conversation's previous one runs mistral-common's checks of the
    list's structure over its tail only, and counts only the messages from the last shared one
    (where no new user message changes the flags of the ones before it)."""
    tok = _tekken()
    validator = tok._chat_completion_request_validator
    checked: dict[str, list[int]] = {"order": [], "pairing": []}
    order, pairing = validator._validate_message_order, validator._validate_tool_calls_followed_by_tool_messages
    validator._validate_message_order = lambda ms: checked["order"].append(len(ms)) or order(ms)
    validator._validate_tool_calls_followed_by_tool_messages = (
        lambda ms: checked["pairing"].append(len(ms)) or pairing(ms))
    counter = MistralCounter(tok, name="mistral-tekken")
    counter.audit_every = 10**9  # reusing builds only
    counted: list[int] = []
    get = counter._same.get
    counter._same.get = lambda *a, **k: counted.append(1) or get(*a, **k)
    messages, tools, ends = _mistral_turns(seed=6, chars=40_000)
    for before, end in zip([0, *ends[:-1]], ends, strict=True):
        for seen in (*checked.values(), counted):
            seen.clear()
        assert counter.count_prompt(messages[:end], tools) == _mistral_own(messages[:end], tools)
        if before > 4:
            new = end - before
            assistant = max(i for i in range(before) if messages[i].role == "assistant")  # the last shared one
            assert checked == {"order": [new + 1], "pairing": [end - assistant + 1]}, (before, end, checked)
            if all(m.role != "user" for m in messages[before:end]):  # (a new user message changes flags before it)
                assert len(counted) <= new + 1, (before, end, counted)
    assert len(ends) > 10 and counter.off == ""


def test_mistral_reusing_builds_make_the_requests_mistral_commons_validation_makes():
    """A reusing build's chat completion request and normalized instruct request (copies of ones
    validated once, given the messages validated when converted) equal the ones mistral-common's
    own validating constructors make of the same messages, field for field."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    normalizer = counter._tok._instruct_request_normalizer
    messages, tools, ends = _mistral_turns(seed=6, chars=30_000)
    for end in ends[::3]:
        ours = counter._instruct(messages[:end], tools, reuse=True)
        own = ChatCompletionRequest(messages=[counter._convert(m) for m in messages[:end]],
                                    tools=counter._convert_tools(tools))
        assert counter._request(messages=own.messages, tools=own.tools) == own
        assert ours == normalizer.from_chat_completion_request(own)  # (reuse off outside _instruct)
        assert ours.model_dump() == normalizer.from_chat_completion_request(own).model_dump()
    assert len(ends) > 6


def test_mistral_builds_meet_the_messages_priced_alone_as_they_were_normalized_and_counted():
    """A session prices each appended message alone, then builds: the build's normalizer finds
    each priced message's normalized form (a tool result's made alone, another message's as a
    run of one) and its count by that object's identity. It normalizes again only runs of
    several user or assistant messages, and where no user message arrived, counts no message
    from its JSON."""
    tok = _tekken()
    normalizer = tok._instruct_request_normalizer
    runs = []
    aggregate = normalizer._aggregate_role
    normalizer._aggregate_role = lambda ms, role, ids: runs.append((role, len(ms))) or aggregate(ms, role, ids)
    counter = MistralCounter(tok, name="mistral-tekken")
    counter.audit_every = 10**9  # reusing builds only
    from_json: list[int] = []
    counted = counter._counted
    counter._counted = lambda *a: from_json.append(1) or counted(*a)  # type: ignore[method-assign]
    messages, tools, ends = _mistral_turns(seed=6, chars=60_000)
    quiet = 0
    for before, end in zip([0, *ends[:-1]], ends, strict=True):
        for m in messages[before:end]:
            assert counter.message_cost(m) == _mistral_own_alone(m), m.role
        runs.clear()
        from_json.clear()
        assert counter.count_prompt(messages[:end], tools) == _mistral_own(messages[:end], tools)
        if before > 4:
            assert all(n > 1 and role.value in ("user", "assistant") for role, n in runs), (before, end, runs)
            if all(m.role != "user" for m in messages[before:end]):
                quiet += 1
                assert not from_json, (before, end, len(from_json))
    assert quiet >= 8 and counter.off == ""


def _mistral_own_alone(m: Message) -> int:
    """mistral-common's own encoding of a request holding ``m`` alone."""
    from mistral_common.protocol.instruct.converters import convert_openai_messages
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    from budgeter.tokenizers.mistral import _request_dict

    own = _own_tekken()
    request = ChatCompletionRequest(messages=convert_openai_messages([_request_dict(m)]))
    alone = own._instruct_request_normalizer.from_chat_completion_request(request)
    return len(own.instruct_tokenizer.encode_instruct(alone).tokens)


def test_mistral_session_tokenizes_each_text_once():
    """Turn by turn, each new message priced alone and then the request counted, as a session
    does: no text of 64 characters or more is tokenized twice, neither when the build meets the
    messages priced alone nor when a user message changes the flags of the messages before it."""
    import collections

    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    counter.audit_every = 10**9  # reusing builds only
    model = counter._tok.instruct_tokenizer.tokenizer._model
    encoded: collections.Counter[str] = collections.Counter()
    encode = model.encode_ordinary
    model.encode_ordinary = lambda s: encoded.update([s]) or encode(s)
    messages, tools, ends = _mistral_turns(seed=6, chars=60_000)
    users = 0
    for before, end in zip([0, *ends[:-1]], ends, strict=True):
        for m in messages[before:end]:
            counter.message_cost(m)
        users += any(m.role == "user" for m in messages[before:end]) and before > 2
        assert counter.count_prompt(messages[:end], tools) == _mistral_own(messages[:end], tools)
    again = {len(s): n for s, n in encoded.items() if n > 1 and len(s) >= 64}
    text = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in messages[:ends[-1]])
    assert users >= 1 and not again and text > 50_000


def test_mistral_builds_report_the_plan_costs_of_the_messages_they_share_as_reusable():
    """A counter with no text form reports as reusable (``cache_break_tokens``) the costs of the
    messages a prompt shares with the previous one, summed only past that prompt's end: equal to
    the plain sum on every build, through compactions that change the prompt's start."""
    from budgeter.core.engine import Engine
    from budgeter.core.incremental import common_length
    from budgeter.core.policy import Policy

    counter = MistralCounter.builtin("tekken_240911.json", name="mistral-tekken")  # not the shared one
    messages, tools, ends = _mistral_turns(seed=7, chars=90_000)
    session = Engine(counter, policy=Policy(window=6_000, reserve=256), tools=tools)
    previous: tuple[Message, ...] = ()
    shortened = 0
    for before, end in zip([0, *ends[:-1]], ends, strict=True):
        session.append(messages[before:end])
        result = session.build()
        same = common_length(previous, result.messages)
        shortened += 0 < same < len(previous)
        assert result.cache_break_tokens == sum(counter.message_cost(m) for m in result.messages[:same])
        previous = result.messages
    assert shortened >= 2 and len(ends) > 10


_ROLES = st.lists(st.sampled_from(["system", "empty system", "user", "assistant", "tool"]), max_size=12)


def _normalized(roles):
    from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage

    make = {"system": lambda n: SystemMessage(content=f"system {n}"),
            "empty system": lambda n: SystemMessage(content=""),
            "user": lambda n: UserMessage(content=f"user {n}"),
            "assistant": lambda n: AssistantMessage(content=f"a {n}"),
            "tool": lambda n: ToolMessage(content=f"result {n}", tool_call_id="abcdefghi")}
    return [make[r](n) for n, r in enumerate(roles)]


@settings(max_examples=200, deadline=None)
@given(_ROLES)
def test_mistral_first_last_user_and_system_prompt_found_in_c_equal_mistral_commons_walks(roles):
    """The first and last user message, and the system prompt, found by the messages' roles equal
    what mistral-common's own walks over every message find (with no user or system message too)."""
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.normalize import InstructRequestNormalizer
    from mistral_common.protocol.instruct.request import InstructRequest
    from mistral_common.tokens.tokenizers.instruct import InstructTokenizerBase

    from budgeter.tokenizers.mistral import _first_last_user, _systems

    messages = _normalized(roles)
    own = InstructTokenizerBase.find_first_last_user(InstructRequest(messages=messages))
    assert _first_last_user(messages, UserMessage) == own
    normalizer = InstructRequestNormalizer.normalizer()
    assert normalizer._aggregate_system_prompts(_systems(messages)) == normalizer._aggregate_system_prompts(messages)
    assert all(m.role == "system" for m in _systems(messages))


def test_mistral_first_last_user_is_walked_where_a_found_message_is_not_a_user_message():
    """A message that says it is the user's but is not of the user class (a subclass of mistral-common's
    could make one) is not taken for one: the walk decides."""
    from mistral_common.protocol.instruct.messages import UserMessage

    from budgeter.tokenizers.mistral import _first_last_user

    messages = _normalized(["assistant", "user", "tool", "user", "assistant"])
    impostor = messages[0].model_copy(update={"role": "user"})
    assert _first_last_user([impostor, *messages[1:]], UserMessage) == (1, 3)
    assert _first_last_user([*messages[:4], impostor], UserMessage) == (1, 3)
