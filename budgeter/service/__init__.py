"""The gRPC front door: server, servicer, wire conversion, error table and auth over ``budgeter.sessions``."""
