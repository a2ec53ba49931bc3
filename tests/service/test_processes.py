"""Real server processes: restart of the embedded store, and replicas sharing one Redis."""

from __future__ import annotations

import threading

import grpc
import pytest

from budgeter.client import Client, ClientError
from tests.service.agent import TOOLS, turns
from tests.service.procs import ServerProcess


def test_embedded_store_survives_a_restart(tmp_path):
    server = ServerProcess("--data-dir", str(tmp_path)).start()
    try:
        with Client(server.target) as c:
            s = c.create_session(session_id="keep", tools=TOOLS, window=8000)
            for t in turns(6):
                s.append(t)
            before = s.prompt()
    finally:
        out = server.stop()
    assert "budgeter: stopped" in out
    assert (tmp_path / "budgeter.db").exists()
    server = ServerProcess("--data-dir", str(tmp_path)).start()
    try:
        with Client(server.target) as c:
            info = c.get_session("keep")
            assert info["message_count"] == sum(len(t) for t in turns(6))
            after = c.session("keep").prompt()
            assert after.messages == before.messages and after.tokens == before.tokens
            for h in before.report.get("handles", ()):
                assert c.session("keep").payload(h)
    finally:
        server.stop()


def test_two_replicas_share_one_redis(redis_url):
    a = ServerProcess("--store", redis_url).start()
    b = ServerProcess("--store", redis_url).start()
    try:
        with Client(a.target) as ca, Client(b.target) as cb:
            sid = ca.create_session(session_id="shared", window=16000).id
            writers, per = 4, 15
            errors: list[BaseException] = []

            def write(w: int) -> None:
                try:
                    with Client((a, b)[w % 2].target) as c:
                        for i in range(per):
                            c.append(sid, [{"role": "user", "content": f"w{w} m{i} first"},
                                           {"role": "assistant", "content": f"w{w} m{i} second"}],
                                     request_id=f"w{w}-{i}")
                            if i % 5 == 0:  # a retry after a lost reply, on the other replica
                                with Client((b, a)[w % 2].target) as other:
                                    again = other.append(sid, [
                                        {"role": "user", "content": f"w{w} m{i} first"},
                                        {"role": "assistant", "content": f"w{w} m{i} second"}],
                                        request_id=f"w{w}-{i}")
                                    assert again["replayed"]
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            pa, pb_ = ca.session(sid).prompt(), cb.session(sid).prompt()
            assert pa.messages == pb_.messages and pa.tokens == pb_.tokens
            contents = [m["content"] for m in pa.messages]
            assert len(contents) == writers * per * 2
            assert len(set(contents)) == len(contents)
            for w in range(writers):
                mine = [x for x in contents if x.startswith(f"w{w} ")]
                assert mine == [f"w{w} m{i} {k}" for i in range(per) for k in ("first", "second")]
            for k in range(0, len(contents), 2):  # each append stays contiguous
                assert contents[k].removesuffix(" first") == contents[k + 1].removesuffix(" second")
            cb.delete_session(sid)
            with pytest.raises(ClientError) as e:
                ca.session(sid).prompt()
            assert e.value.code == grpc.StatusCode.NOT_FOUND
    finally:
        a.stop()
        b.stop()


def test_a_client_keeps_no_copy_of_the_messages_it_sends(tmp_path):
    """An agent process appends for hours: the messages it sent must not stay in its memory (the
    server, another process here, keeps them). 200 appends of 50 KB: what the client's process
    allocated and still holds is far below what was sent."""
    import gc
    import tracemalloc

    server = ServerProcess("--data-dir", str(tmp_path)).start()
    try:
        with Client(server.target) as c:
            s = c.create_session()
            s.append([{"role": "user", "content": "warm-up"}])
            tracemalloc.start()
            try:
                for i in range(200):
                    s.append([{"role": "user", "content": f"{i} " + "x" * 50_000}])
                gc.collect()
                held, _ = tracemalloc.get_traced_memory()  # what this process allocated since and holds
            finally:
                tracemalloc.stop()
    finally:
        server.stop()
    assert held < 1_000_000, held  # 10 MB were sent


def test_a_restart_under_load_reaches_clients_as_a_pause_never_an_error(tmp_path):
    """SIGTERM while eight writers append and build: calls in flight finish, calls the stopping
    server had received but not started come back CANCELLED from gRPC core, new ones UNAVAILABLE;
    the client retries both with the same request until the restarted server answers. No writer
    sees an error, and every acknowledged append is in its session once, in order."""
    first = ServerProcess("--data-dir", str(tmp_path)).start()
    writers = 8
    acked: list[list[str]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []
    done = threading.Event()
    progress = threading.Condition()

    def write(w: int) -> None:
        try:
            with Client(first.target, retry_for=600) as c:  # a restart on a busy machine may be slow
                s = c.create_session(session_id=f"w{w}", window=200_000)
                i = 0
                while not done.is_set():
                    message = [{"role": "user", "content": f"w{w} m{i}"}]
                    if i % 2:
                        s.prompt(append=message)
                    else:
                        s.append(message)
                    with progress:
                        acked[w].append(f"w{w} m{i}")
                        progress.notify_all()
                    i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            with progress:
                progress.notify_all()

    def each_has(n: int) -> None:
        with progress:
            assert progress.wait_for(lambda: errors or all(len(a) >= n for a in acked), timeout=600), acked
        assert not errors, errors

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    second = None
    try:
        each_has(20)
        out = first.stop()  # SIGTERM, and wait for the exit
        assert "budgeter: stopped" in out
        before = min(len(a) for a in acked)
        second = ServerProcess("--data-dir", str(tmp_path), port=first.port).start()
        each_has(before + 20)
    finally:
        done.set()
        for t in threads:
            t.join()
        if second is not None:
            with Client(second.target) as c:
                for w in range(writers):
                    history = [m["content"] for m in c.session(f"w{w}").prompt().messages]
                    assert history == acked[w], w
            second.stop()
        first.stop()
    assert not errors, errors
