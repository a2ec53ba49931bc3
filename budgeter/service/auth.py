"""Optional bearer-token authentication; each token maps to a tenant.

With tokens configured, every budgeter RPC needs ``authorization: Bearer <token>`` metadata
(health checking and reflection stay open for probes). Tokens are compared in constant time and
every configured token is compared, so timing says nothing about which one nearly matched.
Sessions are namespaced by tenant (``Sessions`` stores ``<tenant>:<id>``), so one tenant cannot
read, append to or list another's sessions.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

from budgeter.errors import BudgeterError, InvalidInput

TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


class Unauthenticated(BudgeterError):
    reason = "UNAUTHENTICATED"


class Auth:
    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        """``tokens``: token -> tenant. Empty: authentication is off (single tenant)."""
        self._tokens = [(t.encode(), tenant) for t, tenant in (tokens or {}).items()]
        for token, tenant in self._tokens:
            if len(token) < 16:
                raise InvalidInput("auth tokens must be at least 16 characters", field="auth_tokens")
            if not TENANT.match(tenant):
                raise InvalidInput(f"tenant name {tenant!r} must be 1-64 letters, digits, '_' or '-'",
                                   field="auth_tokens")

    def tenant(self, context: Any) -> str:
        if not self._tokens:
            return ""
        given = b""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
                given = value[7:].strip().encode()
        found = ""
        for token, tenant in self._tokens:
            if hmac.compare_digest(token, given):
                found = tenant
        if not found:
            raise Unauthenticated("a valid bearer token is required (authorization: Bearer <token>)")
        return found
