"""A system message appended mid-session is stored; the session must still build afterwards
(history is append-only, so a refusal at render time would last for the session's TTL)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("tokenizer", ["qwen3.6", "mistral-tekken"])
def test_a_session_with_a_later_system_message_still_builds(client, tokenizer):
    s = client.create_session(tokenizer=tokenizer)
    client.append(s.id, [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "ok"}])
    client.append(s.id, [{"role": "system", "content": "From now on, answer in French."}])
    for _ in range(2):  # and the build after it
        prompt = client.prompt(s.id, append=[{"role": "user", "content": "again"}] if _ == 0 else ())
        assert prompt.tokens > 0
        assert "answer in French" in str(prompt.messages)
    assert [m["role"] for m in prompt.messages if "French" in str(m.get("content"))] == ["user"]
    assert any("system message" in note for note in prompt.report["notes"])
