"""Generated protobuf and gRPC stubs of ``proto/budgeter/v1`` (regenerate: ``python proto/generate.py``)."""
