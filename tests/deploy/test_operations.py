"""deploy/OPERATIONS.md as written: backup and restore of SQLite and Redis with the documented
commands against real servers, and alert rules that use only metrics budgeter exports."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from budgeter.client import Client, ClientError
from budgeter.service.server import create_server
from tests.redis_server import free_port
from tests.service.conftest import settings
from tests.service.procs import ServerProcess

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OPS = (DEPLOY / "OPERATIONS.md").read_text()
PY_BACKUP = 'python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))"'


def say(session, text: str) -> None:
    session.append([{"role": "user", "content": text}])


def contents(client: Client, sid: str) -> list[str]:
    return [m["content"] for m in client.session(sid).prompt().messages]


@pytest.mark.parametrize("tool", ["python", "sqlite3"])
def test_sqlite_backup_and_restore_as_documented(tool, tmp_path):
    assert PY_BACKUP in OPS
    assert "sqlite3 ~/.local/share/budgeter/budgeter.db \".backup '/backup/budgeter.db'\"" in OPS
    if tool == "sqlite3" and shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 tool is not installed (Debian: sqlite3)")
    data, backup = tmp_path / "data", tmp_path / "backup.db"
    server = ServerProcess("--data-dir", str(data)).start()
    try:
        with Client(server.target) as c:
            s = c.create_session(session_id="kept")
            say(s, "before the backup")
            db = str(data / "budgeter.db")  # the server is running and writing: an online backup
            cmd = (["sqlite3", db, f".backup '{backup}'"] if tool == "sqlite3" else
                   [sys.executable, "-c", PY_BACKUP.split('"')[1], db, str(backup)])
            subprocess.run(cmd, check=True, timeout=60)
            say(s, "after the backup")
            c.create_session(session_id="later")
    finally:
        server.stop()
    for suffix in ("-wal", "-shm"):  # restore: stop, remove WAL files, copy the backup, start
        Path(str(data / "budgeter.db") + suffix).unlink(missing_ok=True)
    shutil.copy(backup, data / "budgeter.db")
    server = ServerProcess("--data-dir", str(data)).start()
    try:
        with Client(server.target) as c:
            assert contents(c, "kept") == ["before the backup"]
            with pytest.raises(ClientError) as e:
                c.get_session("later")
            assert e.value.reason == "SESSION_NOT_FOUND"
    finally:
        server.stop()


def test_redis_backup_and_restore_as_documented(private_redis, tmp_path):
    assert "redis-cli -h redis -p 6379 --rdb /backup/budgeter.rdb" in OPS
    redis_cli = shutil.which("redis-cli")
    if redis_cli is None:
        pytest.skip("redis-cli is not installed (Debian: redis-tools)")
    backup = tmp_path / "backup" / "dump.rdb"
    backup.parent.mkdir()
    srv = create_server(settings(store=private_redis.url, store_check_interval=0.1))
    try:
        with Client(srv.target, timeout=10) as c:
            s = c.create_session(session_id="kept", ttl=3600)
            say(s, "before the backup")
            subprocess.run([redis_cli, "-h", "127.0.0.1", "-p", str(private_redis.port), "--rdb", str(backup)],
                           check=True, capture_output=True, timeout=60)
            say(s, "after the backup")
            private_redis.kill()  # the Redis and its data are gone
            restored = subprocess.Popen(  # restore: the snapshot as dbfilename, AOF off for the load
                [private_redis.binary, "--port", str(private_redis.port), "--bind", "127.0.0.1",
                 "--dir", str(backup.parent), "--dbfilename", "dump.rdb", "--appendonly", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 600
                while True:  # budgeter reconnects by itself
                    try:
                        assert contents(c, "kept") == ["before the backup"]
                        break
                    except ClientError as exc:
                        assert exc.reason == "STORE_UNAVAILABLE" and time.monotonic() < deadline
                        time.sleep(0.1)
                assert 0 < float(c.get_session("kept")["ttl"].rstrip("s") or 0) <= 3600
                say(c.session("kept"), "after the restore")
                assert contents(c, "kept") == ["before the backup", "after the restore"]
            finally:
                restored.terminate()
                restored.wait(timeout=10)
    finally:
        srv.stop(0)


def test_alert_rules_use_metrics_a_real_server_exports():
    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"][0]["rules"]
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["/etc/prometheus/alerts.yml"]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in compose["services"]["prometheus"]["volumes"]
    srv = create_server(settings(metrics_port=free_port()))
    try:
        with Client(srv.target) as c:
            s = c.create_session(session_id="m")
            say(s, "hello")
            s.prompt()
        text = urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).read().decode()
    finally:
        srv.stop(0)
    suffixes = {"counter": [""], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}
    exported = {name + suffix for name, kind in re.findall(r"^# TYPE (budgeter_\w+) (\w+)$", text, re.M)
                for suffix in suffixes[kind]}  # labelled series appear only once used; their TYPE always
    methods = set(re.findall(r'method="(\w+)"', text))
    for rule in rules:
        assert rule["alert"] in OPS and rule["annotations"]["summary"]
        for name in re.findall(r"budgeter_\w+", rule["expr"]):
            assert name in exported, (rule["alert"], name)
        for value in re.findall(r'method=~?"([\w|]+)"', rule["expr"]):
            assert set(value.split("|")) <= methods, (rule["alert"], value)
        for label in re.findall(r"by \(([\w, ]+)\)", rule["expr"]):
            assert set(label.replace(" ", "").split(",")) <= {"le", "instance"}
