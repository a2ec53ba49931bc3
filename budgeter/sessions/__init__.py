"""The session layer: sessions over a store and the engine, shared by every front door.

The gRPC service (``budgeter.service``) and the proxy (``budgeter.proxy``) sit side by side over
it and use only its public operations; neither imports the other.
"""
