"""Through the service with a model folder's own chat template (../shared/tokenizers/qwen3): the
count BuildPrompt reports equals transformers' apply_chat_template on the body it returns, on
every turn, while the prompt is compacted to fit."""

from __future__ import annotations

import json

import pytest

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.store import MemoryStore
from tests.bench.bench_service import turns
from tests.bench.sessions import make_session
from tests.service.conftest import settings


@pytest.mark.shared
def test_reported_tokens_equal_transformers_on_the_returned_body(qwen3_path):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(qwen3_path)
    srv = create_server(settings(tokenizers={"qwen3": qwen3_path}), store=MemoryStore())
    try:
        with Client(srv.target) as c:
            body = make_session(5, chars=120_000)
            s = c.create_session(tokenizer="qwen3", tools=body["tools"], window=12_000, reserve=1000)
            compacted = 0
            for k, turn in enumerate(turns(body["messages"])):
                prompt = s.prompt(append=turn)
                compacted += bool(prompt.report.get("compacted"))
                if k % 4 and k != len(turns(body["messages"])) - 1:
                    continue  # check every fourth turn and the last (transformers is slow)
                dicts = []
                for m in prompt.messages:
                    m = dict(m)
                    if m.get("tool_calls"):  # as vLLM and llama.cpp do: arguments parsed into objects
                        m["tool_calls"] = [{**tc, "function": {**tc["function"], "arguments": json.loads(
                            tc["function"]["arguments"])}} for tc in m["tool_calls"]]
                    dicts.append(m)
                ids = hf.apply_chat_template(dicts, tools=prompt.tools, add_generation_prompt=True,
                                             tokenize=True)
                ids = ids["input_ids"] if hasattr(ids, "keys") else ids
                assert prompt.tokens == len(ids) <= prompt.budget
            assert compacted > 0
    finally:
        srv.stop(0)
