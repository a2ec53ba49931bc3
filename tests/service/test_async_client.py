"""The asyncio client: the same operations as the sync one, over grpc.aio."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from budgeter.client import AsyncClient, ClientError
from tests.service.agent import TOOLS, turns


def test_async_agent_loop_and_errors(server):
    async def main() -> None:
        async with AsyncClient(server.target) as client:
            session = await client.create_session(tools=TOOLS, window=6000, reserve=500)
            prompts = []
            for turn in turns(6):
                prompts.append(await session.prompt(append=turn))
            assert all(p.tokens <= p.budget for p in prompts)
            assert (await client.get_session(session.id))["message_count"] == sum(len(t) for t in turns(6))
            verdict = await session.validate_tool_call(
                {"id": "x", "function": {"name": "write_file", "arguments": '{"path": "a", "content": "b'}},
                finish_reason="length")
            assert verdict["status"] == "TRUNCATED" and not verdict["runnable"]
            assert session.id in await client.list_sessions()
            with pytest.raises(ClientError) as e:
                await client.prompt("nope")
            assert (e.value.code, e.value.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
            many = await asyncio.gather(*(client.count_tokens(text=f"text {i}") for i in range(20)))
            assert len(many) == 20 and all(n > 0 for n in many)

    asyncio.run(main())
