"""A replica that has never seen a session does not tokenize its history again: it imports the
token and piece counts stored with each message (here: a second process on the same SQLite file)."""

from __future__ import annotations

import json
import subprocess
import sys

from budgeter.core.messages import from_openai_list
from budgeter.service.profiles import Profiles
from budgeter.service.sessions import Sessions
from budgeter.store import open_store
from tests.service.agent import TOOLS, turns

REPLICA = """
import json, sys
from budgeter.service.profiles import Profiles
from budgeter.service.sessions import Sessions
from budgeter.store import open_store
sessions = Sessions(open_store(sys.argv[1]), Profiles(default="qwen3.6"))
counter = sessions.profiles.counter("")
result, _ = sessions.build("s")
print(json.dumps({"tokens": result.tokens, "tokenized": counter.pieces.chars_tokenized,
                  "messages": len(result.messages)}))
"""


def test_a_new_replica_imports_counts_instead_of_tokenizing(tmp_path):
    url = f"sqlite://{tmp_path}/s.db"
    writer = Sessions(open_store(url), Profiles(default="qwen3.6"))
    writer.create(session_id="s", tools=TOOLS, policy={"window": 200_000})
    history = []
    for t in turns(9):
        writer.append("s", from_openai_list(t))
        history += t
    expected, _ = writer.build("s")
    writer.store.close()
    out = subprocess.run([sys.executable, "-c", REPLICA, url], capture_output=True, text=True,
                         check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["tokens"] == expected.tokens and seen["messages"] == len(history)
    history_chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in history)
    assert history_chars > 40_000
    # only what no stored record covers is tokenized: the system prompt with the tool schemas and
    # the template's tool instructions (1.3K chars with Qwen3.6's template), and the generation prompt
    counter = writer.profiles.counter("")
    system_turn = sum(map(len, counter.pieces.ordinary(counter.render(from_openai_list(history[:1]), TOOLS))))
    assert seen["tokenized"] < system_turn + 300 < history_chars * 0.05, seen
