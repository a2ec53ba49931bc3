"""The gRPC service: ``create_server``/``serve`` over ``Sessions`` (store + engine)."""
