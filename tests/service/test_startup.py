"""Start-up and outages name their cause: busy ports and an unreachable store stop ``budgeter
serve`` with one line and exit code 2; a later store outage is logged once, with the URL (no
password) and the cause, while the liveness health service keeps answering SERVING."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from budgeter.service.server import LIVENESS, SERVICE, create_server
from tests.redis_server import free_port
from tests.service.conftest import settings
from tests.service.procs import GRPC_VARIABLES, ServerProcess


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "budgeter", "serve", "--store", "memory://", *args],
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr and "serving" not in out.stdout, out.stderr
    return lines[0]


def test_a_second_serve_names_the_busy_port_and_its_flag(tmp_path):
    metrics = free_port()
    first = ServerProcess("--data-dir", str(tmp_path), "--metrics-port", str(metrics)).start()
    try:
        line = one_line_error(serve("--port", str(free_port()), "--metrics-port", str(metrics)))
        assert line.startswith("budgeter: PORT_IN_USE:") and f":{metrics}" in line and "--metrics-port" in line
        line = one_line_error(serve("--port", str(first.port), "--metrics-port", "0"))
        assert line.startswith("budgeter: PORT_IN_USE:") and f":{first.port}" in line and "--port" in line
        assert "already in use" in line.lower()
    finally:
        first.stop()


def test_an_unreachable_store_stops_the_start_with_its_url_and_cause():
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    out = subprocess.run([sys.executable, "-m", "budgeter", "serve", "--port", "0", "--metrics-port", "0",
                          "--store", f"redis://:s3cret@127.0.0.1:{port}/0"],
                         capture_output=True, text=True, timeout=600)
    line = one_line_error(out)
    assert line.startswith("budgeter: STORE_UNAVAILABLE:") and "s3cret" not in line
    assert f"redis://:***@127.0.0.1:{port}/0" in line and "refused" in line.lower()


def health(target: str, service: str) -> int:
    """The status a health check answers (a busy machine may take a while: no short deadline)."""
    with grpc.insecure_channel(target) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=600).status


def wait_for(target: str, service: str, status: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while health(target, service) != status:
        assert time.monotonic() < deadline, f"{service!r} never became {status}"
        time.sleep(0.05)


def test_outage_logged_once_with_cause_liveness_stays_serving(private_redis, caplog):
    caplog.set_level(logging.WARNING, logger="budgeter.service")
    srv = create_server(settings(store=private_redis.url, store_check_interval=0.1))
    serving, down = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    try:
        assert health(srv.target, LIVENESS) == serving
        private_redis.stop()
        wait_for(srv.target, "", down)
        assert health(srv.target, SERVICE) == down and health(srv.target, LIVENESS) == serving
        time.sleep(1.0)  # about ten more failed checks
        private_redis.start()
        wait_for(srv.target, "", serving)
    finally:
        srv.stop(0)
    lines = [r.getMessage() for r in caplog.records if r.name == "budgeter.service"]
    outages = [m for m in lines if "unavailable" in m]
    assert len(outages) == 1, lines
    assert private_redis.url in outages[0] and "refused" in outages[0].lower()
    assert len([m for m in lines if "recovered" in m]) == 1


@pytest.mark.parametrize("url, shown", [
    ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://user:pw@h/1", "rediss://user:***@h/1"),
    ("redis://pw@h", "redis://:***@h"),
    ("unix:///run/r.sock?db=0&password=pw", "unix:///run/r.sock?db=0&password=***"),
    ("sqlite:///var/lib/b.db", "sqlite:///var/lib/b.db"),
])
def test_store_urls_are_shown_without_passwords(url, shown):
    assert settings(store=url).store_shown == shown


def _allowed(pid: int) -> set[str]:
    """Each thread's CPU list, as the kernel holds it."""
    lists = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                lists.add(line.split(":", 1)[1].strip())
    return lists


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or not Path("/proc/self/task").exists(),
                    reason="needs Linux CPU affinity and /proc")
def test_cpus_pins_every_thread_of_the_server():
    cpu = max(os.sched_getaffinity(0))
    server = ServerProcess("--store", "memory://", "--cpus", str(cpu)).start()
    try:
        assert server.proc is not None
        assert _allowed(server.proc.pid) == {str(cpu)}  # grpc's threads, the RPC workers, all of them
    finally:
        out = server.stop()
    assert f"cpus {cpu})" in out


def test_serve_starts_grpc_with_the_experiments_setting_unless_the_environment_names_its_own():
    """The default turns grpc's EventEngine client and listener off in the server process; grpc
    knows both names (an unknown one is logged as "Unknown experiment" when grpc starts); a
    caller's own ``GRPC_EXPERIMENTS`` wins; an empty setting leaves grpc's default."""
    from budgeter.settings import Settings

    default = Settings.model_fields["grpc_experiments"].default
    assert default == "-event_engine_client,-event_engine_listener"
    cases = [({}, default), ({"GRPC_EXPERIMENTS": "-event_engine_client"}, "-event_engine_client"),
             ({"BUDGETER_GRPC_EXPERIMENTS": ""}, None)]
    for extra, shown in cases:
        server = ServerProcess("--store", "memory://", env=extra, unset=GRPC_VARIABLES)
        server.start()
        out = server.stop()
        line = next(line for line in out.splitlines() if "serving on" in line)
        if shown is None:
            assert "grpc experiments" not in line, line
        else:
            assert f", grpc experiments {shown})" in line, line
        assert "Unknown experiment" not in out, out
        assert "budgeter: stopped" in out


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity")
def test_cpus_the_process_may_not_use_stop_the_start():
    absent = max(os.sched_getaffinity(0)) + 1
    line = one_line_error(serve("--port", "0", "--metrics-port", "0", "--cpus", f"0,{absent}"))
    assert line.startswith("budgeter: CPUS_UNAVAILABLE:") and f"cpus {absent} are not available" in line
    assert "--cpus" in line
    line = one_line_error(serve("--port", "0", "--metrics-port", "0", "--cpus", "3-1"))
    assert line.startswith("budgeter: INVALID_SETTINGS:") and "runs backwards" in line


def _first_answer(target: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            health(target, LIVENESS)
            return
        except grpc.RpcError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.02)


def test_serve_is_not_ready_until_warmed_up_and_a_sigterm_then_stops_it_cleanly():
    """``budgeter serve`` answers health checks as soon as it listens, NOT_SERVING (liveness
    SERVING) while it loads its profiles and starts its RPC workers, so a balancer sends it no call
    that would wait on that; SERVING after. A SIGTERM during the warm-up stops it gracefully, and
    it never reports SERVING."""
    serving, down = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    for stop_early in (False, True):  # (16 RPC workers to set up: a warm-up of ~1 s, not ~0.5)
        server = ServerProcess("--store", "memory://", env={"BUDGETER_MAX_WORKERS": "16"})
        server.proc = subprocess.Popen([sys.executable, "-m", "budgeter", "serve", *server.args],
                                       env=server.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            _first_answer(server.target)
            assert health(server.target, "") == down and health(server.target, SERVICE) == down
            assert health(server.target, LIVENESS) == serving
            if stop_early:
                seen = []
                server.proc.send_signal(signal.SIGTERM)
                while server.proc.poll() is None:
                    with contextlib.suppress(grpc.RpcError):
                        seen.append(health(server.target, ""))
                    time.sleep(0.02)
                assert serving not in seen and server.proc.returncode == 0
            else:
                wait_for(server.target, "", serving)
                assert health(server.target, SERVICE) == serving
        finally:
            out = server.stop()
        assert "budgeter: serving on" in out and "budgeter: stopped" in out and "Traceback" not in out, out
