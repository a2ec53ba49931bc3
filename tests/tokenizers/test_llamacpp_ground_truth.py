"""Ground truth: budgeter's count equals what a real llama.cpp server counts.

Each profile's vocabulary is written into a tiny random-weight GGUF (tests/llamacpp.py) with the
same chat template, served by ``llama-server --jinja``; the same messages and tools go through
``/v1/chat/completions`` (``max_tokens: 1``, ``usage.prompt_tokens``) and through
``/apply-template`` + ``/tokenize``. Sessions hold tool calls, tool results, failed calls and
their retries, reasoning, parallel calls, CJK and emoji; checked before and after compaction.
Skips with the reason where the server binary is not built (.ci/build-llama-server).
"""

from __future__ import annotations

import json

import pytest

from budgeter.core.counting import sent
from budgeter.core.engine import Engine, trim
from budgeter.core.incremental import MIN_MESSAGES
from budgeter.core.messages import Message, to_openai
from budgeter.core.policy import Policy
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import template_text
from tests import llamacpp
from tests.bench.bench_engine import turns
from tests.tokenizers.agent_sessions import session

SMALL = Policy(window=6000, reserve=500)

NEMO_TEMPLATE = "mistralai-Mistral-Nemo-Instruct-2407.jinja"
"""The chat template published with mistralai/Mistral-Nemo-Instruct-2407 (its tokenizer_config.json;
Tekken vocabulary), from llama.cpp's copy in models/templates/ (ggml-org/llama.cpp, read from the
sdist .ci/build-llama-server keeps)."""


def _tekken_json():
    from importlib import resources

    return resources.files("mistral_common") / "data" / "tekken_240911.json"


def _vocab(profile: str):
    if profile == "tekken-gguf":  # what llama.cpp's converter writes for a Mistral-format Tekken model
        template = llamacpp.published_template(NEMO_TEMPLATE)
        if template is None:
            pytest.skip(f"llama.cpp sdist with models/templates/{NEMO_TEMPLATE} not cached")
        return llamacpp.vocab_from_tekken(_tekken_json(), chat_template=template)
    if profile in ("qwen3.6", "qwen2.5"):
        from tests.tokenizers.builtin_vocab import converted

        return llamacpp.vocab_from_hf(converted(profile), chat_template=template_text(profile))
    from tests.conftest import shared_tokenizer

    return llamacpp.vocab_from_hf(shared_tokenizer(profile))


def _spec(profile: str, model) -> str:
    if profile == "tekken-gguf":  # the GGUF itself, as a user points budgeter at one
        return str(model)
    if profile in ("qwen3.6", "qwen2.5"):
        return profile
    from tests.conftest import shared_tokenizer

    return shared_tokenizer(profile)


# (profile, budgeter server convention, llama-server extra args)
CASES = {
    "qwen3.6": ("qwen3.6", "llama.cpp", ()),
    "qwen3.6-no-preserve": ("qwen3.6", "vllm", ("--no-reasoning-preserve",)),
    "qwen2.5": ("qwen2.5", "llama.cpp", ()),
    "qwen3-folder": ("qwen3", "llama.cpp", ()),
    # the built-in mistral-tekken profile counts mistral-common's encoding instead (vLLM's mistral
    # mode, Mistral's API); how that differs from llama.cpp's is measured below
    "tekken-gguf": ("tekken-gguf", "llama.cpp", ()),
}


@pytest.fixture(scope="module", params=list(CASES))
def served(request, tmp_path_factory):
    llamacpp.require_server()
    profile, server, args = CASES[request.param]
    model = tmp_path_factory.mktemp("gguf") / f"{profile}.gguf"
    llamacpp.write_tiny_gguf(_vocab(profile), model)
    counter = resolve(f"{_spec(profile, model)}@{server}")
    with llamacpp.serve(model, extra_args=args) as url:
        yield counter, url


def _served_text(rendered: str) -> str:
    """budgeter's render as ``/apply-template`` shows it: llama-server strips the BOS a template
    writes where its vocabulary adds one anyway (Mistral's ``<s>``), and ``/tokenize`` adds it back."""
    return rendered.removeprefix("<s>")


def _server_counts(url, messages, tools, counter=None):
    """The server's counts of the request budgeter returns for ``messages`` (its rewrite, where the
    profile's template needs one)."""
    wire = sent(counter, messages, tools or ()) if counter is not None else None
    body, tools = wire if wire is not None else ([to_openai(m) for m in messages], tools)
    usage = llamacpp.chat_prompt_tokens(url, body, tools)
    text = llamacpp.apply_template(url, body, tools)
    return usage, text, llamacpp.tokenize(url, text, add_special=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_counts_equal_llama_server_before_and_after_compaction(served, seed):
    counter, url = served
    messages, tools = session(seed, chars=30_000)
    result = trim(messages, counter=counter, tools=tools, policy=SMALL)
    # compacted, or (where the failure hygiene alone made it fit) at least rewritten
    assert result.tokens <= SMALL.budget and (result.compacted or list(result.messages) != messages)
    for prompt in (messages, list(result.messages)):
        usage, text, ids = _server_counts(url, prompt, tools, counter)
        assert _served_text(counter.render(prompt, tools)) == text
        assert counter.count_prompt(prompt, tools) == usage == len(ids)
        assert counter.pieces.tokenizer.encode_full(counter.render(prompt, tools)) == ids


def test_turn_by_turn_builds_equal_llama_server(served):
    """Built turn by turn, as an agent builds before every model turn (windowed renders once the
    conversation is long enough, full renders when it compacts), every prompt's count equals the
    server's render of it, tokenized by the server."""
    counter, url = served
    messages, tools = session(3, chars=40_000)
    engine = Engine(counter, policy=Policy(window=12_000, reserve=500), tools=tools)
    windowed, checked = counter.windowed.windowed, 0
    for turn in turns(messages):
        engine.append(turn)
        result = engine.build()
        if len(engine.history) >= MIN_MESSAGES:
            wire = sent(counter, result.messages, tools)  # the request budgeter returns
            body, schemas = wire if wire is not None else ([to_openai(m) for m in result.messages], tools)
            text = llamacpp.apply_template(url, body, schemas)
            assert result.tokens == len(llamacpp.tokenize(url, text, add_special=True))
            checked += 1
    assert checked > 10
    # windows were used, except where an early reasoning block rules them out for templates that
    # drop earlier reasoning (this session has one near its start), or where the system text moves
    assert counter.windowed.windowed > windowed or counter.windowed.drops_reasoning or _system_moves(counter)


def _system_moves(counter) -> bool:
    """Whether the template writes the system text somewhere else once the conversation grows
    (Mistral Nemo's: into the last turn, and only if that is the user's). The text before any
    window then changes from build to build, and every build renders whole (still exact)."""
    system, user = Message("system", "zqsystem"), Message("user", "u")
    first = counter.render([system, user], ())
    later = counter.render([system, user, Message("assistant", "a"), Message("user", "v")], ())
    return later.find("zqsystem") != first.find("zqsystem")


def test_no_tools_and_a_lone_user_turn(served):
    counter, url = served
    messages, _ = session(4, chars=4_000)
    for prompt in (messages[:2], [m for m in messages if m.role in ("system", "user")]):
        usage, _, ids = _server_counts(url, prompt, None, counter)
        assert counter.count_prompt(prompt, ()) == usage == len(ids)


def test_a_system_message_after_the_first_turn_is_accepted_and_exact(served):
    """An agent may append a system message mid-session; the request budgeter returns for it is
    accepted by the server and counted exactly (Qwen3.6's template refuses it where it stands, so
    budgeter sends it as a user message and says so)."""
    counter, url = served
    messages, tools = session(5, chars=6_000)
    messages = [*messages[:4], Message("system", "From now on, answer in French."), *messages[4:]]
    result = trim(messages, counter=counter, tools=tools, policy=SMALL)
    for prompt in (messages, list(result.messages)):
        usage, text, ids = _server_counts(url, prompt, tools, counter)
        assert "answer in French" in text
        assert counter.count_prompt(prompt, tools) == usage == len(ids)


NOT_NFC = ["caf\u0065\u0301 na\u0069\u0308ve", "\u212b ngstr\u00f6m \u2126", "\uf945\uf900 \U0002f800",
           "A\u030a\u0323 \u1e0b\u0323", "ᴸ.fragment\uf945购票_episode𝔰"]


def test_text_that_nfc_would_change_counts_as_the_server_reads_it(served):
    """llama.cpp applies no Unicode normalization: decomposed accents, compatibility ideographs and
    the like are counted as it tokenizes them, not as the tokenizer.json's NFC normalizer would
    make them (a random Qwen3 model once wrote U+F945: one token on the server, two after NFC)."""
    counter, url = served
    messages, tools = session(4, chars=4_000)
    prompt = [*messages[:2], *[Message(role="user", content=text) for text in NOT_NFC]]
    usage, text, ids = _server_counts(url, prompt, None, counter)
    assert counter.count_prompt(prompt, ()) == usage == len(ids)
    assert counter.pieces.tokenizer.encode_full(counter.render(prompt, ())) == ids
    for piece in NOT_NFC:
        assert counter.count_text(piece) == len(llamacpp.tokenize(url, piece))


def test_cut_arguments_refused_by_server_and_compaction_makes_them_acceptable(served):
    """A call whose arguments were cut mid-string: llama.cpp refuses the request (HTTP 500), as
    strict providers do; budgeter still counts it (never a crash), and the compacted prompt, whose
    arguments are valid JSON again, is accepted and counted exactly."""
    counter, url = served
    messages, tools = session(1, chars=30_000, truncated=True)
    with pytest.raises(llamacpp.ServerError) as refused:
        _server_counts(url, messages, tools, counter)
    assert refused.value.status in (400, 500)
    assert counter.count_prompt(messages, tools) > 0
    result = trim(messages, counter=counter, tools=tools, policy=SMALL)
    usage, _, ids = _server_counts(url, list(result.messages), tools, counter)
    assert result.tokens == counter.count_prompt(list(result.messages), tools) == usage == len(ids)


@pytest.fixture(scope="module")
def llama3_served(tmp_path_factory):
    """The shared Llama 3.1 folder's template renders neither tool schemas nor tool calls: the
    server silently drops them; budgeter counts them (as text, and says so) and never under-counts."""
    from tests.conftest import shared_tokenizer

    llamacpp.require_server()
    folder = shared_tokenizer("llama3_1")
    model = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(folder), tmp_path_factory.mktemp("l3") / "l3.gguf")
    with llamacpp.serve(model) as url:
        yield resolve(folder), url


def test_llama3_exact_without_tool_traffic(llama3_served):
    counter, url = llama3_served
    messages, _ = session(2, chars=20_000)
    plain = [m for m in messages if m.role in ("system", "user")]
    usage, text, ids = _server_counts(url, plain, None)
    # llama.cpp's /apply-template leaves out the leading BOS, which /tokenize adds back
    assert counter.render(plain, ()) == "<|begin_of_text|>" + text
    assert counter.pieces.tokenizer.encode_full(counter.render(plain, ())) == ids
    assert counter.count_prompt(plain, ()) == usage == len(ids)


def test_llama3_never_undercounts_what_the_server_drops(llama3_served):
    counter, url = llama3_served
    messages, tools = session(2, chars=20_000)
    usage, text, _ = _server_counts(url, messages, tools)
    assert "read_file" not in text  # the server dropped every call and schema
    assert counter.count_prompt(messages, tools) > usage
    assert any("tool calls" in n for n in counter.notes)


def test_a_final_assistant_message_is_counted_as_the_servers_prefill(served):
    """llama-server takes a conversation that ends with the assistant's message as a prefill of it
    and opens no new turn (``[user "hi", assistant "Done."]``: 15 prompt tokens on Qwen3.6, where a
    new turn made 22); the vLLM convention opens one, as vLLM does by default."""
    counter, url = served
    messages, tools = session(6, chars=6_000)
    history = [m for m in messages if m.role in ("system", "user")][:2]
    endings = [Message("assistant", "Done."), Message("assistant", "  Done. \n", reasoning="Checked it."),
               Message("assistant", "", reasoning="Still thinking"), Message("assistant", "")]
    prefill = counter.prefill
    for last in endings:
        for prompt in ([Message("user", "hi"), last], [*history, last], [*messages, last]):
            usage, text, ids = _server_counts(url, prompt, tools, counter)
            if prefill:
                assert _served_text(counter.render(prompt, tools)) == text
                assert counter.count_prompt(prompt, tools) == usage == len(ids)
            else:
                assert counter.count_prompt(prompt, tools) >= usage
    result = trim([*messages, Message("assistant", "Partial answer")], counter=counter, tools=tools, policy=SMALL)
    usage, _, _ = _server_counts(url, list(result.messages), tools, counter)
    assert result.tokens == usage or not prefill


def _special_parity(counter, url):
    """Every added token's text, and every ordinary entry llama.cpp makes special at load, alone
    and in text: budgeter's count and ids equal the server's ``/tokenize`` (``parse_special``)."""
    from budgeter.tokenizers.promoted import EOG, FIRST_OF, USER_DEFINED

    tok = counter.pieces.tokenizer
    looked_for = {*EOG, *USER_DEFINED, *(t for group in FIRST_OF for t in group)}
    texts = sorted({*tok.specials, *looked_for})
    for text in texts:
        for sample in (text, f"a {text} b{text}{text}\n"):
            ids = llamacpp.tokenize(url, sample)
            assert counter.count_text(sample) == len(ids), sample
            assert tok.encode_full(sample) == ids, sample
    return texts


def test_special_tokens_and_promoted_entries_count_as_the_server_reads_them(served):
    counter, url = served
    if not counter.prefill:  # the vLLM convention reads text as Hugging Face does
        pytest.skip("the vLLM convention does not mirror llama.cpp's loader")
    assert len(_special_parity(counter, url)) > 20
    messages, tools = session(7, chars=6_000)
    prompt = [*messages, Message("user", "Close the tag: </s> and </s></s>, not <|endoftext|>.")]
    usage, text, ids = _server_counts(url, prompt, tools, counter)
    assert "</s>" in text
    assert counter.count_prompt(prompt, tools) == usage == len(ids)


def test_llama3_special_tokens_count_as_the_server_reads_them(llama3_served):
    counter, url = llama3_served
    assert len(_special_parity(counter, url)) > 256


def test_a_developer_message_is_accepted_and_counted_as_the_server_renders_it(served):
    """OpenAI's ``developer`` role: llama-server takes it and renders it as ``system``; budgeter
    keeps it as sent, counts it as that render, and (where the template takes system text only
    first) returns a request the server accepts."""
    from budgeter.core.messages import from_openai

    counter, url = served
    messages, tools = session(8, chars=6_000)
    first = from_openai({"role": "developer", "content": "Answer tersely."})
    later = from_openai({"role": "developer", "content": "From now on, answer in French."})
    assert first.role == later.role == "developer"
    body = [m for m in messages if m.role != "system"]
    for prompt in ([first, *body], [first, *body[:3], later, *body[3:]], [first, *body, Message("user", "Go on.")]):
        usage, text, ids = _server_counts(url, prompt, tools, counter)
        assert _served_text(counter.render(prompt, tools)) == text
        # (Mistral Nemo's template writes the system text into the last turn, and only if it is the user's)
        assert "Answer tersely." in text or prompt[-1].role != "user"
        assert counter.count_prompt(prompt, tools) == usage == len(ids)
        result = trim(prompt, counter=counter, tools=tools, policy=SMALL)
        assert result.messages[0] is first
        usage, _, ids = _server_counts(url, list(result.messages), tools, counter)
        assert result.tokens == usage == len(ids)


def test_lone_surrogates_are_repaired_so_the_server_accepts_and_counts_them(served):
    """Escaped lone surrogates in a call's arguments (llama-server: HTTP 500) and in content (HTTP
    400) are made U+FFFD on the way in; the request and its compaction are accepted, counted exactly."""
    import json

    from budgeter.core.messages import from_openai_list

    counter, url = served
    messages, tools = session(9, chars=20_000)
    raw = json.loads(json.dumps([to_openai(m) for m in messages]))
    call = next(m for m in raw if m.get("tool_calls"))
    call["tool_calls"][0]["function"]["arguments"] = '{"path": "a.txt", "note": "x \\udc00 y \\ud83d\\ude00"}'
    raw.append({"role": "user", "content": "odd text: \ud800 here"})
    prompt = from_openai_list(raw)
    result = trim(prompt, counter=counter, tools=tools, policy=SMALL)
    for sent_prompt in (prompt, list(result.messages)):
        usage, _, ids = _server_counts(url, sent_prompt, tools, counter)
        assert counter.count_prompt(sent_prompt, tools) == usage == len(ids)


TOOL_SHAPES = {
    "no description": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}},
    "keys in another order": {"parameters": {"properties": {"a": {"type": "string"}}, "type": "object"},
                              "description": "d", "name": "f"},
    "strict, as the OpenAI Agents SDK sends": {"name": "f", "description": "d", "strict": True,
                                               "parameters": {"type": "object", "properties": {}}},
    "no parameters": {"name": "f", "description": "d"},
}


@pytest.mark.parametrize("shape", list(TOOL_SHAPES))
def test_tools_count_as_the_server_rebuilds_them(served, shape):
    """llama.cpp's server rebuilds each tool before the template sees it (a missing description
    becomes "", other keys are dropped, the keys come in its order): the count follows."""
    counter, url = served
    if any(note.startswith("server: vLLM") for note in counter.notes):
        pytest.skip("a profile counting as vLLM does, which hands the tools over as sent")
    tools = [{"type": "function", "function": TOOL_SHAPES[shape]}]
    messages = [Message("user", "hi")]
    usage, text, ids = _server_counts(url, messages, tools, counter)
    assert _served_text(counter.render(messages, tools)) == text
    assert counter.count_prompt(messages, tools) == usage == len(ids)


# ---------------------------------------------------------------------------------------------
# Tekken: the GGUF llama.cpp serves against the built-in mistral-tekken profile (mistral-common)

INDIC = ["यह एक परीक्षण है और मैं हिंदी में लिख रहा हूँ।", "నేను తెలుగులో రాస్తున్నాను"]
PLAIN = ["Fix the failing test in src/app.py and keep README.md in sync.", "def add(a, b):\n    return a + b\n",
         "请把上下文窗口的预算再检查一遍 🧮🚀", "Ünïcödé, ÀbcÉdef, приветМир, ΑθήναΕλλάδα, café naïve."]


@pytest.fixture(scope="module")
def tekken_served(tmp_path_factory):
    """The Tekken GGUF with Mistral Nemo's template, served; budgeter's counter for the GGUF and
    the built-in mistral-tekken profile."""
    llamacpp.require_server()
    model = llamacpp.write_tiny_gguf(_vocab("tekken-gguf"), tmp_path_factory.mktemp("tekken") / "tekken.gguf")
    with llamacpp.serve(model) as url:
        yield url, resolve(str(model)), resolve("mistral-tekken")


def _mistral_ready(messages):
    """Tekken V3 (mistral-common) takes an assistant message with content or tool calls, not both,
    and has no place for reasoning: the calls' own text is dropped, as Nemo's template drops it."""
    import dataclasses

    return [dataclasses.replace(m, content="", reasoning=None) if m.tool_calls else
            dataclasses.replace(m, reasoning=None) for m in messages]


def test_tekken_gguf_text_splits_as_llama_cpp_splits_it(tekken_served):
    """llama.cpp splits Tekken text with its own rewrite of the split regex (no \\p{Lu}/\\p{Ll}:
    combining marks are not letters), not the tokenizer's: Devanagari and Telugu vowel signs break
    words apart. budgeter's GGUF count follows the server, id for id; mistral-common's (the
    built-in profile) counts fewer tokens there, and the same ids on text without such marks."""
    url, gguf, builtin = tekken_served
    for text in [*PLAIN, *INDIC, *NOT_NFC]:
        ids = llamacpp.tokenize(url, text)
        assert gguf.count_text(text) == len(ids) and gguf.pieces.tokenizer.encode_full(text) == ids, text
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    tekken = MistralTokenizer.from_file(str(_tekken_json())).instruct_tokenizer.tokenizer
    for text in PLAIN:
        assert tekken.encode(text, bos=False, eos=False) == llamacpp.tokenize(url, text), text
    for text in INDIC:  # measured: 16 against 24 and 11 against 16 tokens
        assert len(tekken.encode(text, bos=False, eos=False)) < len(llamacpp.tokenize(url, text)), text


_TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
_SYSTEM = {"role": "system", "content": "You are terse."}
_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]}


def _user(text):
    return {"role": "user", "content": text}


def _result(content):
    return {"role": "tool", "tool_call_id": "call_1", "content": content}


def _nine(messages):
    """The messages with the call's id made 9 alphanumeric characters, as Nemo's template wants."""
    return [{**m, "tool_calls": [{**m["tool_calls"][0], "id": "abcdefghi"}]} if m.get("tool_calls") else
            {**m, "tool_call_id": "abcdefghi"} if m.get("tool_call_id") else m for m in messages]


def test_builtin_mistral_tekken_equals_llama_server_except_where_nemos_template_differs(tekken_served):
    """Why the built-in mistral-tekken profile's ground truth is mistral-common (vLLM's mistral
    mode, Mistral's API), not llama.cpp: on the Tekken GGUF with Mistral Nemo's published template
    the two agree on plain turns, a system prompt, tool schemas, calls and JSON results, and differ
    where Nemo's Jinja template renders otherwise than mistral-common encodes:
    - a result that is not JSON: mistral-common writes it as a JSON string, the template raw
      (measured +4 tokens for a 2-line result);
    - a conversation that ends with a result (each agent step): the template writes the system
      prompt only into a last user turn, so the server drops it; mistral-common keeps it;
    - a user turn right after results: the server refuses the template's render (budgeter's GGUF
      profile sends an empty assistant turn, one </s> more than mistral-common);
    - Indic scripts, tokenized apart at vowel signs by llama.cpp (the test above)."""
    from budgeter.core.messages import from_openai_list

    url, gguf, builtin = tekken_served

    def counts(messages, tools=None):
        m = from_openai_list(messages)
        wire = sent(gguf, m, tools or ())
        body, schemas = wire if wire is not None else ([to_openai(x) for x in m], tools)
        served = llamacpp.chat_prompt_tokens(url, body, schemas or None)
        assert gguf.count_prompt(m, tools or ()) == served
        return served, builtin.count_prompt(m, tools or ())

    answered = [_user("Read a.py"), _CALL, _result('{"lines": 3}'), {"role": "assistant", "content": "Done."},
                _user("Thanks")]
    for messages, tools in (([_user("Hello 你好 😀"), {"role": "assistant", "content": "Hi!"}, _user("Fix it")], None),
                            ([_SYSTEM, _user("Hello"), {"role": "assistant", "content": "Hi!"}, _user("Go")], None),
                            ([_SYSTEM, _user("Read a.py")], _TOOLS), (answered, _TOOLS),
                            ([_user("Read a.py"), _CALL, _result('{"lines": 3}')], _TOOLS)):
        served, own = counts(messages, tools)
        assert served == own, messages

    text = 'def f():\n    return "x"\n'
    served, own = counts([*answered[:2], _result(text), *answered[3:]], _TOOLS)
    assert own > served  # the JSON string mistral-common writes, given to the template, counts the same
    assert counts([*answered[:2], _result(json.dumps(text)), *answered[3:]], _TOOLS)[0] == own

    step = [_SYSTEM, _user("Read a.py"), _CALL, _result('{"lines": 3}')]
    served, own = counts(step, _TOOLS)
    assert own > served == counts(step[1:], _TOOLS)[1]  # the server's prompt has no system text
    assert "You are terse." not in llamacpp.apply_template(url, _nine(step), _TOOLS)

    interrupted = [_user("Read a.py"), _CALL, _result('{"lines": 3}'), _user("Stop.")]
    for raw, reason in ((answered, "length 9"), (_nine(interrupted), "must alternate")):  # as a client sends them
        with pytest.raises(llamacpp.ServerError, match=reason):
            llamacpp.chat_prompt_tokens(url, raw, _TOOLS)
    served, own = counts(interrupted, _TOOLS)
    assert served == own + 1  # the </s> of the empty answer budgeter sends
