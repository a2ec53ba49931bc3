"""What grpc's own experiments cost a lone caller: ``budgeter serve`` and one agent process, each
with grpc's default or with ``GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener``
(``budgeter serve``'s default since 2026-11-26, the ``grpc_experiments`` setting).

    python -m tests.bench.bench_grpc [--rounds 3] [--calls 1500] [--turns]

Each case starts a real ``budgeter serve`` (memory store) with its environment, and the agent in
a process of its own (grpc reads the variable once, as it starts): ``GetSession`` in a loop, or
with ``--turns`` one-call turns (``prompt(append=..., since=...)``) of generated 60K-char coding
sessions. Printed per call: the agent's CPU, the server's CPU (from /proc) and the wall time. The
cases alternate within each round, so a change of the machine's speed falls on all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from budgeter.settings import Settings
from tests.bench.bench_load import cpu_seconds as server_cpu

OFF: str = Settings.model_fields["grpc_experiments"].default
CASES = [("default", "default"), ("off", "default"), ("default", "off"), ("off", "off")]


def agent(target: str, pid: int, calls: int, turns: bool) -> dict[str, float]:
    """Runs in the agent's own process: the calls, timed."""
    from budgeter.client import Client
    from budgeter.v1 import budgeter_pb2 as pb

    client = Client(target, timeout=60)
    if turns:
        from tests.bench.bench_service import turns as split
        from tests.bench.sessions import make_session

        bodies = [make_session(seed, chars=60_000) for seed in range(2 + calls // 15)]

        def run(bodies: list[dict]) -> int:
            n = 0
            for body in bodies:
                session, prompt = client.create_session(tools=body["tools"]), None
                for turn in split(body["messages"]):
                    prompt = session.prompt(append=turn, since=prompt)
                    n += 1
            return n

        run(bodies[:2])  # warm-up
        work = lambda: run(bodies[2:])  # noqa: E731
    else:
        request = pb.GetSessionRequest(name=f"sessions/{client.create_session().id}")

        def loop(n: int) -> int:
            for _ in range(n):
                client.stub.GetSession(request, timeout=60)
            return n

        loop(300)
        work = lambda: loop(calls)  # noqa: E731
    cpu, wall, server = time.process_time(), time.perf_counter(), server_cpu(pid)
    n = work()
    return {"calls": n, "agent": (time.process_time() - cpu) / n, "server": (server_cpu(pid) - server) / n,
            "wall": (time.perf_counter() - wall) / n}


def case(server_env: str, agent_env: str, calls: int, turns: bool) -> dict[str, float]:
    from tests.service.procs import GRPC_VARIABLES, ServerProcess, environ

    def env(which: str) -> dict[str, str]:
        return {"GRPC_EXPERIMENTS": OFF} if which == "off" else {"BUDGETER_GRPC_EXPERIMENTS": ""}

    server = ServerProcess("--store", "memory://", env=env(server_env), unset=GRPC_VARIABLES)
    server.start()
    try:
        assert server.proc is not None
        code = (f"import json; from tests.bench.bench_grpc import agent; "
                f"print(json.dumps(agent({server.target!r}, {server.proc.pid}, {calls}, {turns})))")
        out = subprocess.run([sys.executable, "-c", code], env=environ(env(agent_env), unset=GRPC_VARIABLES),
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=1500,
                    help="calls per case (with --turns: about as many turns, in sessions of 15)")
    ap.add_argument("--turns", action="store_true", help="one-call turns of generated sessions instead of GetSession")
    args = ap.parse_args()
    what = "one-call turns" if args.turns else "GetSession calls"
    print(f"{what}, one agent process, `budgeter serve` (memory store); per call: agent CPU / server CPU / wall")
    print(f"experiments 'off' = GRPC_EXPERIMENTS={OFF}")
    for r in range(args.rounds):
        cells = []
        for server_env, agent_env in CASES:
            got = case(server_env, agent_env, args.calls, args.turns)
            cells.append(f"server {server_env:7s} agent {agent_env:7s}: {got['agent'] * 1e6:4.0f} / "
                         f"{got['server'] * 1e6:4.0f} / {got['wall'] * 1e6:5.0f} us")
        print(f"round {r + 1}:\n  " + "\n  ".join(cells))


if __name__ == "__main__":
    main()
