"""The executor recipe: run only what budgeter finds runnable, and say how each call went.

    session = Client("127.0.0.1:50051").create_session(tools=TOOLS)
    run_calls(session, reply, execute)   # reply: the model's message; execute(name, args) -> str

A call whose arguments were cut or broken, that breaks its schema or leaves the workspace is not
run: the model gets one line saying why. The identical repeat of a failed call gets the earlier
error without running again. A write whose path came back empty is saved under the path
`SuggestPath` proposes. Each tool message declares its `status`, which budgeter takes as the
strongest evidence of how the call went.
"""

import json


def run_calls(session, reply, execute):
    session.append([reply])
    for call in reply.get("tool_calls", []):
        check = session.validate_tool_call(call)         # arguments, schema, markers, repeats
        problems = {p["code"]: p for p in check["problems"]}
        status = "error"
        if check["runnable"]:
            output, status = run(execute, call["function"]["name"], json.loads(check["arguments"]))
        elif "REPEATED_FAILURE" in problems:              # one short line, no re-run
            output = f"Error: same as call #{check['repeat_of']}: {check['repeat_error']}"
        elif problems.get("EMPTY_REQUIRED", {}).get("field") == "path":
            args = json.loads(check["arguments"])
            path = session.suggest_path(args["content"], tool=call["function"]["name"])["path"]
            output, status = run(execute, "write_file", {**args, "path": path})
            output = f"path was empty; wrote {path}. " + output
        else:                                             # TRUNCATED, INVALID, schema, markers, paths
            output = "Error: " + ("; ".join(p["message"] for p in check["problems"]) or check["detail"])
        session.append([{"role": "tool", "tool_call_id": call["id"], "content": output, "status": status}])


def run(execute, name, args):
    try:
        return execute(name, args), "ok"
    except Exception as exc:                              # the tool failed: say so
        return f"Error: {exc}", "error"
