"""``ollama:NAME[:TAG]``: a model pulled by Ollama, found in Ollama's models folder.

Ollama keeps a model as a manifest, ``manifests/HOST/NAMESPACE/NAME/TAG`` (JSON, Docker-style),
whose layers point at extension-less blobs ``blobs/sha256-HEX``: the GGUF
(``application/vnd.ollama.image.model``), a Go ``TEMPLATE`` (``...image.template``), a default
``SYSTEM`` prompt (``...image.system``) and parameters. ``NAME`` may be ``model``, ``ns/model`` or
``host/ns/model``; the defaults are ``registry.ollama.ai``, ``library`` and ``latest``, as in
Ollama. The folder is ``OLLAMA_MODELS`` or ``~/.ollama/models`` -- Ollama's own setting, read here
where Ollama reads it.

Ollama renders its Go template, which budgeter cannot run: the count uses the GGUF's Jinja
template, and ``compare`` says how far that is from what Ollama sends.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from budgeter.core.typing import ChatFormat
from budgeter.errors import InvalidTokenizerSpec, TokenizerLoadError, UnknownTokenizer

PREFIX = "ollama:"
MODEL, TEMPLATE, SYSTEM = ("application/vnd.ollama.image.model", "application/vnd.ollama.image.template",
                           "application/vnd.ollama.image.system")


def models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


@dataclass(frozen=True, slots=True)
class OllamaModel:
    name: str
    manifest: Path
    gguf: Path
    template: str | None
    system: str | None


def parse_name(name: str) -> tuple[str, str, str, str]:
    """``"qwen3:8b"`` -> ``("registry.ollama.ai", "library", "qwen3", "8b")``."""
    if not name or any(c.isspace() for c in name) or ".." in name:
        raise InvalidTokenizerSpec(f"invalid Ollama model name {name!r}", field="tokenizer")
    path, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    parts = path.split("/")
    if len(parts) > 3 or not all(parts):
        raise InvalidTokenizerSpec(f"invalid Ollama model name {name!r}", field="tokenizer")
    host, namespace = "registry.ollama.ai", "library"
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return host, namespace, parts[-1], tag or "latest"


def find(name: str, root: Path | None = None) -> OllamaModel:
    root = root or models_dir()
    host, namespace, model, tag = parse_name(name)
    manifest = root / "manifests" / host / namespace / model / tag
    if not manifest.is_file():
        known = installed(root)
        raise UnknownTokenizer(
            f"Ollama model {name!r} is not in {root} (no {manifest.relative_to(root)}); "
            f"installed: {', '.join(known) or 'none'}", metadata={"available": ",".join(known), "path": str(root)})
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
        by_type = {layer["mediaType"]: layer["digest"] for layer in layers}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerLoadError(f"{manifest}: not an Ollama manifest: {exc}",
                                 metadata={"path": str(manifest)}) from exc
    if MODEL not in by_type:
        raise TokenizerLoadError(f"{manifest}: no model layer", metadata={"path": str(manifest)})
    return OllamaModel(f"{model}:{tag}", manifest, _blob(root, by_type[MODEL]),
                       _text(root, by_type.get(TEMPLATE)), _text(root, by_type.get(SYSTEM)))


def installed(root: Path) -> list[str]:
    base = root / "manifests"
    if not base.is_dir():
        return []
    out = []
    for tag in sorted(p for p in base.glob("*/*/*/*") if p.is_file()):
        host, namespace, model = tag.parts[-4:-1]
        prefix = "" if (host, namespace) == ("registry.ollama.ai", "library") else (
            f"{namespace}/" if host == "registry.ollama.ai" else f"{host}/{namespace}/")
        out.append(f"{prefix}{model}:{tag.name}")
    return out


def _blob(root: Path, digest: str) -> Path:
    if not re.fullmatch(r"sha256[:-][0-9a-f]{64}", digest):
        raise TokenizerLoadError(f"bad layer digest {digest!r} in an Ollama manifest")
    path = root / "blobs" / digest.replace(":", "-")
    if not path.is_file():
        raise TokenizerLoadError(f"Ollama blob {path} is missing", metadata={"path": str(path)})
    return path


def _text(root: Path, digest: str | None) -> str | None:
    return _blob(root, digest).read_text(encoding="utf-8") if digest else None


_ACTION = re.compile(r"\{\{-?.*?-?\}\}", re.S)
_PROBE_TOOL = {"type": "function", "function": {"name": "zqtool", "description": "zq",
                                                "parameters": {"type": "object", "properties": {}}}}


def literal_pieces(go_template: str) -> list[str]:
    """The text a Go template writes itself, between its actions, trimmed as ``{{-``/``-}}`` trim."""
    pieces = []
    for piece in _ACTION.split(go_template):
        piece = piece.strip()
        if piece:
            pieces.append(piece)
    return pieces


def compare(go_template: str | None, fmt: ChatFormat) -> tuple[bool, str]:
    """(agree, what the report says) for Ollama's Go template against the Jinja format counted."""
    if not go_template:
        return False, "Ollama manifest has no TEMPLATE layer (Ollama sends the raw prompt): count is approximate"
    convo = [{"role": "system", "content": "zqsys"}, {"role": "user", "content": "zquser"},
             {"role": "assistant", "content": "zqanswer"}, {"role": "user", "content": "zqnext"}]
    tools_in_go = ".Tools" in go_template
    try:
        rendered = fmt.render(convo, [_PROBE_TOOL] if tools_in_go else None, add_generation_prompt=True)
    except Exception as exc:
        return False, f"the GGUF's Jinja template cannot render a probe conversation ({exc}): count is approximate"
    missing, at = [], 0
    for piece in literal_pieces(go_template):
        found = rendered.find(piece, at)
        if found < 0:
            missing.append(piece)
        else:
            at = found + len(piece)
    if tools_in_go and "zqtool" not in rendered:
        missing.append("(tool schemas)")
    if missing:
        shown = ", ".join(repr(p[:40]) for p in missing[:5])
        return False, (f"Ollama renders its Go TEMPLATE, which differs from the GGUF's Jinja template "
                       f"(pieces not found: {shown}): the count follows the Jinja template and is approximate")
    return True, "Ollama's Go TEMPLATE agrees with the GGUF's Jinja template on a probe conversation"


def describe(model: OllamaModel) -> list[str]:
    notes = [f"Ollama model {model.name}: {model.manifest}", f"GGUF blob {model.gguf.name}"]
    if model.system:
        notes.append("Ollama adds its default SYSTEM prompt when a request has no system message; "
                     "not counted unless the conversation carries it")
    return notes


def spec_name(spec: str) -> str | None:
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else None

