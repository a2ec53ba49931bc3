"""The ``budgeter`` command line (also ``python -m budgeter``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from budgeter.errors import BudgeterError, InvalidInput

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact, failure-aware context-window management for LLM agents.")


def fail(reason: str, message: str) -> NoReturn:
    typer.echo(f"budgeter: {reason}: {message}", err=True)
    raise typer.Exit(2)


def read_body(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail("INPUT_UNREADABLE", f"{path}: {exc.strerror or exc}")
    try:
        body = json.loads(text)
    except ValueError as exc:
        fail("INVALID_JSON", f"{path}: {exc}")
    if isinstance(body, list):
        body = {"messages": body}
    if not isinstance(body, dict) or "messages" not in body:
        fail("INVALID_INPUT", f"{path}: expected a chat-completions body with 'messages'")
    return body


def names(csv: str) -> list[str]:
    return [n.strip() for n in csv.split(",") if n.strip()]


TokenizerOpt = Annotated[str | None, typer.Option("--tokenizer", "-t", help=(
    "Built-in name (see `budgeter tokenizers`) or a path: model folder, tokenizer.json, .gguf, "
    ".tiktoken. Default: qwen3.6."))]


@app.command()
def trim(
    input: Annotated[str, typer.Argument(help="Chat-completions request body (JSON), or - for stdin.")],
    tokenizer: TokenizerOpt = None,
    window: Annotated[int, typer.Option(help="Context window of the model, in tokens.")] = 32768,
    reserve: Annotated[int, typer.Option(help="Tokens kept free for the reply.")] = 2048,
    low_water: Annotated[float, typer.Option(help="When over budget, compact to this share of it.")] = 1.0,
    protect_tail: Annotated[int, typer.Option(help="Latest turns kept as they are.")] = 2,
    chat_format: Annotated[str | None, typer.Option(
        help="Use budgeter's named format (chatml) instead of the model template.")] = None,
    payloads: Annotated[Path | None, typer.Option(help="Write elided payloads here as {handle: text}.")] = None,
    reads: Annotated[str, typer.Option(help="Comma-separated tools that read files.")] = "",
    writes: Annotated[str, typer.Option(help="Comma-separated tools that write whole files.")] = "",
    edits: Annotated[str, typer.Option(help="Comma-separated tools that edit files in place.")] = "",
    shrink_min_chars: Annotated[int, typer.Option(help="Shrink texts longer than this outside the tail.")] = 2000,
    shrink_keep_chars: Annotated[int, typer.Option(help="Characters a shrunk text keeps.")] = 600,
    keep_latest_failure: Annotated[bool, typer.Option(help="Keep the latest failure's error verbatim.")] = True,
) -> None:
    """Compact a request body so it fits WINDOW - RESERVE tokens by the exact count."""
    from budgeter.core import trim as run_trim
    from budgeter.core.messages import from_openai_list
    from budgeter.core.policy import policy_from_dict
    from budgeter.tokenizers import resolve

    body = read_body(input)
    try:
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise InvalidInput("tools must be a list", field="tools")
        counter = resolve(tokenizer, chat_format=chat_format)
        policy = policy_from_dict({
            "window": window, "reserve": reserve, "low_water": low_water,
            "protect_tail_turns": protect_tail, "shrink_min_chars": shrink_min_chars,
            "shrink_keep_chars": shrink_keep_chars, "keep_latest_failure": keep_latest_failure,
            "file_tools": {"reads": names(reads), "writes": names(writes), "edits": names(edits)}})
        result = run_trim(from_openai_list(body["messages"]), counter=counter, tools=tools, policy=policy)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)
    report = {"tokenizer": counter.name, **result.report()}
    out: dict[str, Any] = {"messages": result.openai_messages(), "report": report}
    if tools:
        out["tools"] = tools
    if payloads is not None:
        payloads.write_text(json.dumps(result.payloads, ensure_ascii=False, indent=1), encoding="utf-8")
    typer.echo(json.dumps(out, ensure_ascii=False, indent=1))


@app.command()
def tokenizers() -> None:
    """List the built-in tokenizer names."""
    from budgeter.tokenizers import DEFAULT, available

    for name, desc in available().items():
        typer.echo(f"{name}{' (default)' if name == DEFAULT else ''}\t{desc}")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on. [default: 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="gRPC port; 0 picks a free one. [default: 50051]")] = None,
    store: Annotated[str | None, typer.Option(help=(
        "memory://, sqlite:///PATH or redis://HOST:PORT/DB (redis+cluster:// for a Cluster). "
        "[default: SQLite at DATA_DIR/budgeter.db]"))] = None,
    data_dir: Annotated[Path | None, typer.Option(
        help="Where the embedded store lives. [default: ~/.local/share/budgeter]")] = None,
    tokenizer: Annotated[list[str] | None, typer.Option("--tokenizer", "-t", help=(
        "Extra tokenizer profile NAME=SPEC (repeatable); the built-ins are always offered."))] = None,
    default_tokenizer: Annotated[str | None, typer.Option(help="Profile used when a request names none.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        help="Prometheus /metrics port; 0 turns it off. [default: 9464]")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML file with any of these settings.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the gRPC service until SIGTERM or Ctrl-C. Settings also come from BUDGETER_* variables."""
    import logging

    from pydantic import ValidationError

    from budgeter.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config, host=host, port=port, store=store, data_dir=data_dir,
                                 tokenizers=tokenizer, default_tokenizer=default_tokenizer,
                                 metrics_port=metrics_port)
    except (ValidationError, ValueError) as exc:
        fail("INVALID_SETTINGS", str(exc).replace("\n", " "))
    from budgeter.service.server import serve as run

    try:
        run(settings)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)


def main() -> None:
    app()
