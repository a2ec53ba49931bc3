"""What the base install and its extras hold: the base front doors (gRPC service, client, CLI with
the default tokenizer) run without any extra's packages, and a part that needs an extra says which
in one line. An extra is made absent in a subprocess by a ``None`` entry in ``sys.modules`` (its
import then fails as when it is not installed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import grpc

from budgeter.errors import MissingExtra
from budgeter.service.errors import code_for

EXTRAS = [m for modules in MissingExtra.MODULES.values() for m in modules] + ["numpy", "httpx", "httpx_sse"]


def run(code: str, *, absent: list[str], args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys\nfor name in {absent!r}:\n    sys.modules[name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_base_front_doors_need_no_extra():
    done = run("""
        import budgeter.cli, budgeter.client, budgeter.service.server
        from budgeter.core.messages import Message
        from budgeter.tokenizers import resolve
        counter = resolve(None)
        print(counter.count_prompt([Message("user", "hi")], []))
    """, absent=EXTRAS)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_budgeter_proxy_without_the_proxy_extra():
    done = run("from budgeter.cli import main\nsys.argv = ['budgeter', *sys.argv[1:]]\nmain()",
               absent=["starlette", "uvicorn", "aiohttp"], args=("proxy", "--store", "memory://"))
    assert done.returncode == 2
    assert done.stderr == ("budgeter: MISSING_EXTRA: budgeter proxy needs the proxy extra: "
                           "pip install 'budgeter[proxy]'\n")


def test_each_part_names_its_extra(tmp_path):
    empty = tmp_path / "model.gguf"
    empty.write_bytes(b"")
    cases = {"redis": "from budgeter.store import open_store\nopen_store('redis://127.0.0.1:1/0')",
             "gguf": f"from budgeter.tokenizers import resolve\nresolve({str(empty)!r})",
             "mistral": "from budgeter.tokenizers import resolve\nresolve('mistral-tekken')"}
    for extra, code in cases.items():
        done = run(f"""
            from budgeter.errors import MissingExtra
            try:
                {code.replace(chr(10), chr(10) + ' ' * 16)}
            except MissingExtra as exc:
                print(exc.metadata['extra'], exc.message)
        """, absent=list(MissingExtra.MODULES[extra]))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{extra} "), done.stdout
        assert done.stdout.rstrip().endswith(f"needs the {extra} extra: pip install 'budgeter[{extra}]'")


def test_over_grpc_a_missing_extra_is_a_failed_precondition():
    assert code_for(MissingExtra("the mistral-tekken tokenizer", "mistral")) == grpc.StatusCode.FAILED_PRECONDITION
