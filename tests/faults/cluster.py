"""A real Redis Cluster of 3 primaries with 1 replica each (or ``replicas`` each) on free ports, for
failover tests: kill a primary, stall a replica (SIGSTOP), fail over by hand, and heal (the dead
node comes back as a replica). ``cluster-node-timeout`` is 1 s, so a dead primary's replica takes
over in about 2-3 s."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.redis_server import redis_binary
from tests.store.test_redis_cluster import cluster_ports

NODE_TIMEOUT_MS = 1000


def wait_for(condition: Callable[[], object], what: str, timeout: float = 600.0) -> None:
    """Poll ``condition`` until it holds; ``timeout`` is only a safety net."""
    deadline = time.monotonic() + timeout
    while not _quiet(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _quiet(condition: Callable[[], object]) -> object:
    try:
        return condition()
    except (redis.RedisError, OSError):
        return False


class Cluster:
    PRIMARIES = 3

    def __init__(self, *, replicas: int = 1) -> None:
        server = redis_binary()
        cli = shutil.which("redis-cli") or (str(Path(server).with_name("redis-cli")) if server else None)
        if not server or not cli or not Path(cli).exists():
            raise LookupError("needs redis-server and redis-cli")
        self.server, self.cli = server, cli
        self.base = Path(tempfile.mkdtemp(prefix="budgeter-failover-"))
        self.replicas = replicas
        self.ports = cluster_ports(self.PRIMARIES * (1 + replicas))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:1])

    def start(self) -> Cluster:
        for port in self.ports:
            self._run(port)
        for port in self.ports:
            wait_for(lambda p=port: self._ping(p), f"node {port}")
        subprocess.run([self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        self.wait_healthy()
        return self

    def _run(self, port: int) -> None:
        d = self.base / str(port)
        d.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [self.server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             "--cluster-replica-validity-factor", "0", "--dir", str(d), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def _ping(self, port: int) -> bool:
        with self.node(port) as n:
            return bool(n.ping())

    def role(self, port: int) -> str:
        with self.node(port) as n:
            return n.execute_command("ROLE")[0].decode()

    def owner(self, session_id: str, prefix: str = "budgeter") -> tuple[int, int]:
        """(primary port, replica port) of the slot that holds the session (its first replica)."""
        primary, replicas = self.shard(session_id, prefix)
        return primary, replicas[0]

    def shard(self, session_id: str, prefix: str = "budgeter") -> tuple[int, list[int]]:
        """(primary port, replica ports) of the slot that holds the session."""
        slot = key_slot(f"{prefix}:{{{session_id}}}:meta".encode())
        live = next(p for p in self.ports if self.procs[p].poll() is None and _quiet(lambda p=p: self._ping(p)))
        with self.node(live) as n:
            for low, high, primary, *replicas in n.execute_command("CLUSTER SLOTS"):
                if low <= slot <= high:
                    return int(primary[1]), [int(r[1]) for r in replicas]
        raise LookupError(slot)

    def promoted(self, replicas: list[int]) -> int | None:
        """The one of ``replicas`` that is a primary now, if any (one that does not answer is not)."""
        return next((p for p in replicas if _quiet(lambda p=p: self.role(p) == "master")), None)

    def kill(self, port: int) -> None:
        self.procs[port].kill()
        self.procs[port].wait(timeout=10)

    def pause(self, port: int, *, stop: bool) -> None:
        os.kill(self.procs[port].pid, signal.SIGSTOP if stop else signal.SIGCONT)

    def wait_healthy(self) -> None:
        """Every node up, the cluster ok, every primary with its replicas' links up, and every node
        seeing them all in its slot map (so ``shard`` names every replica, whichever node it asks)."""
        for port, proc in self.procs.items():
            if proc.poll() is not None:
                self._run(port)  # a killed node rejoins (nodes.conf kept) as a replica
        def healthy() -> bool:
            roles, states, seen = [], [], []
            for port in self.ports:
                with self.node(port) as n:
                    roles.append(n.execute_command("ROLE"))
                    states.append(n.cluster("INFO")["cluster_state"])
                    seen += [len(replicas) for _, _, _, *replicas in n.execute_command("CLUSTER SLOTS")]
            linked = [r for r in roles if r[0] == b"slave" and r[3] == b"connected"]
            return (states == ["ok"] * len(self.ports) and len(linked) == self.PRIMARIES * self.replicas
                    and set(seen) == {self.replicas})
        wait_for(healthy, f"a healthy cluster ({self.PRIMARIES} primaries, "
                 f"{self.PRIMARIES * self.replicas} linked replicas)", timeout=90)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
                proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)
