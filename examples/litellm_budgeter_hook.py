"""budgeter's stateless fit as a LiteLLM proxy pre-call hook.

Put this file beside LiteLLM's ``config.yaml`` and register the instance:

    litellm_settings:
      callbacks: litellm_budgeter_hook.budgeter_fit

Before LiteLLM forwards a chat completion, the hook posts the body to a running
``budgeter proxy``'s ``POST /v1/budgeter/fit`` and forwards the fitted messages instead (exact count
with the model's own template; failed calls collapsed; every argument valid JSON). Set
``BUDGETER_FIT_URL`` if budgeter is not at 127.0.0.1:8400.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

try:
    from litellm.integrations.custom_logger import CustomLogger
except ImportError:  # the hook's logic runs without LiteLLM too (budgeter's tests do)
    CustomLogger = object  # type: ignore[assignment,misc]

FIT_URL = os.environ.get("BUDGETER_FIT_URL", "http://127.0.0.1:8400/v1/budgeter/fit")


class BudgeterFit(CustomLogger):  # type: ignore[misc]
    def __init__(self, url: str = FIT_URL, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any],
                                  call_type: str) -> dict[str, Any]:
        if call_type not in ("completion", "acompletion") or not data.get("messages"):
            return data
        body = {"messages": data["messages"], "tools": data.get("tools") or []}
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            r = await client.post(self.url, json=body)
        if r.status_code != 200:  # e.g. 400 PINNED_OVER_BUDGET: let LiteLLM report it
            raise ValueError(f"budgeter fit: {r.json()['error']['code']}: {r.json()['error']['message']}")
        return {**data, "messages": r.json()["body"]["messages"]}


budgeter_fit = BudgeterFit()
