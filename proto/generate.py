"""Regenerate the checked-in Python stubs: ``python proto/generate.py`` (needs grpcio-tools).

The stubs live in ``budgeter/v1`` so that ``pip install .`` ships them and nobody runs protoc by
hand; ``tests/service/test_stubs.py`` regenerates them into a temporary folder and diffs.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTOS = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))


def generate(out: Path) -> None:
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT.parent)
