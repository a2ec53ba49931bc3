"""budgeter proxy: an OpenAI-compatible front door beside the gRPC service, over the same sessions.

An agent changes its ``base_url`` to the proxy; each chat completion is reconciled with its stored
session (``reconcile.py``), the prompt sent upstream is the one ``BuildPrompt`` would return, and
the reply (passed through byte for byte, ``stream.py``) is appended with its finish_reason.
"""

from budgeter.proxy.app import create_app
from budgeter.proxy.server import ProxyServer, open_sessions, serve, start

__all__ = ["ProxyServer", "create_app", "open_sessions", "serve", "start"]
