"""The client never imports the server: no service, store or tokenizer module is loaded by
``import budgeter.client`` (checked in a fresh interpreter)."""

import json
import subprocess
import sys


def test_the_client_loads_no_server_module():
    code = ("import json, sys, budgeter.client; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('budgeter.'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert "budgeter.client" in loaded
    assert not [m for m in loaded if m.startswith(("budgeter.service", "budgeter.sessions", "budgeter.store",
                                                   "budgeter.tokenizers", "budgeter.proxy"))]
