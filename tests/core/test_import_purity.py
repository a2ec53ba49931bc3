import subprocess
import sys


def test_core_imports_no_heavy_dependencies():
    code = (
        "import sys, budgeter.core, budgeter.core.steps, budgeter.errors\n"
        "bad = [m for m in ('grpc', 'redis', 'google.protobuf', 'transformers', 'tokenizers', 'tiktoken')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"budgeter.core imported {out.stdout.strip()}"
