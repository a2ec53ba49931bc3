"""A complete agent loop over budgeter: append what happened, ask for the prompt to send.

    budgeter serve &                                   # gRPC on 127.0.0.1:50051
    python examples/agent_loop.py "Write a landing page" --llm http://127.0.0.1:8080/v1

The model is any OpenAI-compatible server (llama.cpp, vLLM, Ollama, LM Studio). Tools write and
read files under --workdir. A call budgeter's verdict marks not runnable (cut by the length limit,
broken JSON, an empty required path, a path outside --workdir, the repeat of a call that already
failed) is never run: the model gets a one-line error instead. The tools also resolve each path
(symlinks followed) and refuse one that lands outside --workdir, which budgeter, never touching
the disk, cannot see.
"""

import argparse
import json
from pathlib import Path

from openai import OpenAI

from budgeter.client import Client

SYSTEM = "You are a careful coding agent. Use the tools to create and read files."
TOOLS = [
    {"type": "function", "function": {"name": "write_file", "description": "Write a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]


def run(workdir: Path, name: str, args: dict) -> str:
    root = workdir.resolve()
    path = (root / args["path"]).resolve()  # where the call would land: .. and symlinks followed
    if path == root or not path.is_relative_to(root):
        raise PermissionError(f"{args['path']!r} is outside the workspace")
    if name == "write_file":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["content"])
        return f"wrote {args['path']} ({len(args['content'])} chars)"
    return path.read_text()


def agent(task: str, *, llm: str, budgeter: str, workdir: Path, max_turns: int = 20) -> int:
    """Runs the loop; returns how many tool calls were executed."""
    model = OpenAI(base_url=llm, api_key="-")
    session = Client(budgeter).create_session(tools=TOOLS, window=32768, reserve=2048,
                                              path_root=str(workdir.resolve()))  # absolute paths inside it run
    prompt = session.prompt(append=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}])
    executed = 0
    for _ in range(max_turns):
        choice = model.chat.completions.create(model="local", **prompt.body).choices[0]
        reply = {**choice.message.model_dump(exclude_none=True), "finish_reason": choice.finish_reason}
        verdicts = session.append([reply])["messages"][0]["tool_calls"]  # one verdict per call
        if not verdicts:
            return executed  # the model answered without a tool call: done
        results = []
        for v in verdicts:
            if v["runnable"]:
                try:
                    output, status = run(workdir, v["name"], json.loads(v["arguments"])), "ok"
                except (OSError, ValueError) as exc:  # the tool failed or refused: say so (declared)
                    output, status = f"Error: {exc}", "error"
                executed += 1
            else:
                problems = "; ".join(p["message"] for p in v["problems"]) or v["detail"]
                output, status = f"Error: not run: {problems}", "error"
            results.append({"role": "tool", "tool_call_id": v["id"], "content": output, "status": status})
        prompt = session.prompt(append=results, since=prompt)  # fits the window, by the exact count
    return executed


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--llm", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--budgeter", default="127.0.0.1:50051")
    ap.add_argument("--workdir", type=Path, default=Path("workspace"))
    a = ap.parse_args()
    print(f"{agent(a.task, llm=a.llm, budgeter=a.budgeter, workdir=a.workdir)} tool calls run")
