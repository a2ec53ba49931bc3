"""budgeter proxy: an OpenAI-compatible front door beside the gRPC service, over the same sessions.

An agent changes its ``base_url`` to the proxy; each chat completion is reconciled with its stored
session (``reconcile.py``), the prompt sent upstream is the one ``BuildPrompt`` would return, and
the reply (passed through byte for byte, ``stream.py``) is appended with its finish_reason.
"""
