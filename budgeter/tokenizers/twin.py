"""The fastokens twin of a ``tokenizer.json``: the same counts as Hugging Face's, from a faster library.

fastokens is a Rust reimplementation of Hugging Face's pipeline. Handed a ``tokenizer.json``
(``twin``), it counts only after its ids equal Hugging Face's on a built-in corpus (code, prose,
numbers, whitespace runs, many scripts, emoji, combining marks) and on a sample of the
vocabulary's own tokens; where it refuses or differs, Hugging Face tokenizers counts.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

Pieces = Callable[[str], list[str]]
"""The runs of ordinary text of a string, between its added tokens: what a twin is handed."""


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, inverted: character -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def state(part: Any) -> Any:
    """A tokenizers component (normalizer, pre-tokenizer, model) as its JSON state; None for None."""
    return json.loads(part.__getstate__()) if part is not None else None


def twin(tok: Any, pieces: Pieces | None = None) -> Renewing | None:
    """A counter of ordinary text (no added tokens) equal to ``tok``'s, or None.
    ``pieces``: how the caller splits text at added tokens (the checks encode what it hands over)."""
    return _fastokens(tok, pieces or (lambda text: [text]))


LATER_CHARS = 4_000_000
"""Characters a one-shot process counts with Hugging Face tokenizers before it makes the twin
(``Later``): about what Hugging Face counts in the time a large vocabulary's twin takes to make
and check (seconds for Gemma 3's 262K tokens)."""
_deferred = False


def defer(on: bool = True) -> None:
    """Make twins made from now on ``Later`` (``on``): the CLI's one-shot commands (``budgeter trim``,
    ``render``) count a few pieces, and making a twin cost them more than all their counting
    (``bench_flat``, ready). Servers make theirs at load."""
    global _deferred
    _deferred = on


def deferred() -> bool:
    return _deferred


_background = False


def background(on: bool = True) -> None:
    """Make twins made from now on in a thread of their own (``Background``): ``budgeter serve``
    and ``budgeter proxy`` answer while a large vocabulary's twin is made and checked (seconds for
    Gemma 3's 262K tokens, most of a GGUF profile's load: ``bench_flat``, ready)."""
    global _background
    _background = on


def backgrounded() -> bool:
    return _background


class Later:
    """A twin made once its process has counted ``LATER_CHARS`` characters without one; until then
    (and for good where ``twin`` gives none) the caller counts with Hugging Face tokenizers."""

    def __init__(self, tok: Any, pieces: Pieces | None, *, after: int = LATER_CHARS) -> None:
        self._args = (tok, pieces)
        self._left = after
        self._lock = threading.Lock()
        self._twin: Renewing | None = None
        self.made = False

    def __call__(self, chars: int) -> Renewing | None:
        """The twin once due (made and checked now if not yet), else None; ``chars``: what the
        caller is about to count."""
        self._left -= chars
        if self._left > 0:
            return None
        with self._lock:
            if not self.made:
                self._twin = twin(*self._args)
                self.made = True
        return self._twin


class Background:
    """A twin made in a thread of its own from the start; until it is made (and for good where
    ``twin`` gives none) the caller counts with Hugging Face tokenizers, whose counts the twin's
    equal. ``made`` turns true once the twin (or its refusal) is in; ``done`` is set then."""

    def __init__(self, tok: Any, pieces: Pieces | None) -> None:
        self._twin: Renewing | None = None
        self.made = False
        self.done = threading.Event()
        # not a daemon, as for ``Renewing``: an interpreter ending while it runs inside fastokens
        # would abort the process; a server stopping meanwhile waits for it
        threading.Thread(target=self._make, args=(tok, pieces), name="budgeter-fastokens-twin").start()

    def _make(self, tok: Any, pieces: Pieces | None) -> None:
        try:
            self._twin = twin(tok, pieces)
        except Exception as exc:  # (twin refuses what it cannot check): Hugging Face counts on
            log.warning("budgeter: a fastokens twin could not be made: %s", exc)
        finally:
            self.made = True  # after the twin: a reader that sees made sees it
            self.done.set()

    def __call__(self, chars: int) -> Renewing | None:
        """The twin once made, else None (``Later``'s signature)."""
        return self._twin if self.made else None


RENEW_CHARS = 256_000_000
"""Characters a fastokens tokenizer counts before a fresh one is made to replace it (see
``Renewing``)."""
log = logging.getLogger("budgeter.counting")


class Renewing:
    """A fastokens tokenizer's count, set up in each thread that counts and made again now and then.

    - Set up: a thread counts ``CORPUS`` before its first count, because a fastokens tokenizer's
      first long call in a thread is many times slower than later ones (``bench_service``).
    - Renewed: fastokens keeps every word it has merged in a cache that only grows; after
      ``RENEW_CHARS`` characters a fresh tokenizer is made from the same JSON in a background
      thread and replaces it (the old one and its cache are freed when the last count using it
      ends), which bounds the memory of a long-running server."""

    def __init__(self, make: Callable[[], Any], first: Any, *, every: int = RENEW_CHARS) -> None:
        self._make = make
        self._every = every
        self._left = every
        self._current = (first, threading.local())
        self._renewing = threading.Lock()
        self.renewals = 0
        _LIVE.add(self)

    def __call__(self, text: str) -> int:
        return len(self._ready(len(text)).encode_ordinary(text))

    def many(self, texts: Sequence[str]) -> list[int]:
        """``[self(t) for t in texts]``, made ready once for all of them: a Gemma 3 turn counts
        dozens of pieces, its added tokens cutting text at every line break (``bench_service
        --profiles gemma3``)."""
        encode = self._ready(sum(map(len, texts))).encode_ordinary
        return [len(encode(t)) for t in texts]

    def _ready(self, chars: int) -> Any:
        """The tokenizer to count ``chars`` characters with, set up in this thread."""
        fast, ready = self._current
        if not getattr(ready, "done", False):
            for sample in CORPUS:
                fast.encode_ordinary(sample)
            ready.done = True
        self._left -= chars
        if self._left <= 0 and self._renewing.acquire(blocking=False):
            self._left = self._every
            # not a daemon: a daemon thread inside fastokens when the interpreter exits is
            # unwound through Rust and aborts the process ("FATAL: exception not rethrown")
            threading.Thread(target=self._renew, name="budgeter-fastokens-renew").start()
        return fast

    def warm(self) -> None:
        """Set up in this thread now (``warm_thread``)."""
        self._ready(0)

    def _renew(self) -> None:
        try:
            fresh = self._make()
        except Exception as exc:  # (the same source made one before): keep counting with the old one
            log.warning("budgeter: a fresh fastokens tokenizer could not be made: %s", exc)
        else:
            self._current = (fresh, threading.local())
            self.renewals += 1
        finally:
            self._renewing.release()


_LIVE: weakref.WeakSet[Renewing] = weakref.WeakSet()
"""Every fastokens counter made in this process (``warm_thread``)."""


def warm_thread() -> None:
    """Set up every fastokens counter of this process in the calling thread: a server's workers
    call it as they start, so that no turn pays a thread's set-up, which put profiles counted by
    fastokens past the p99 target (``bench_service``). Never raises (a pool whose initializer
    raises refuses every call): a counter that fails here is set up by its first count instead."""
    for renewing in list(_LIVE):
        try:
            renewing.warm()
        except Exception as exc:  # (it counts only the built-in corpus, which its checks passed)
            log.warning("budgeter: a fastokens tokenizer could not be set up in a worker: %s", exc)


SAMPLED = 4000
"""About how many of the vocabulary's own tokens (as text) the fastokens twin is also checked on."""


def _fastokens(tok: Any, pieces: Pieces) -> Renewing | None:
    """fastokens, a Rust reimplementation of Hugging Face's pipeline that loads the same
    ``tokenizer.json`` (normalizer, pre-tokenizer, model), with its truncation and padding off.
    Used only where its ids equal ``tok``'s on the built-in corpus and on a sample of the
    vocabulary's own tokens."""
    try:
        import fastokens
    except ImportError:  # pragma: no cover - a core dependency
        return None
    source = tok.to_str()

    def make() -> Any:
        made = fastokens.Tokenizer.from_json_str(source)
        made.no_truncation()
        made.no_padding()
        return made

    try:
        fast = make()
    except Exception:  # a tokenizer.json it does not take
        return None
    encode = fast.encode_ordinary
    size = tok.get_vocab_size(with_added_tokens=False)
    sample = [tok.decode([i], skip_special_tokens=False) for i in range(0, size, max(1, size // SAMPLED))]
    checked = [piece for text in (*CORPUS, *sample) for piece in pieces(text) if piece]
    try:
        if any(encode(piece).ids != tok.encode(piece, add_special_tokens=False).ids for piece in checked):
            return None
    except Exception:  # text it refuses
        return None
    return Renewing(make, fast)


CORPUS = (
    "def count(self, text: str) -> int:\n        return len(self._tok.encode(text))\n\n\n",
    "    if x == 1:\n\t\treturn {'a': [1, 2, 3]}  # ok\r\n",
    "The quick brown fox can't jump; it's 12,345.678 km/h and I'M sure they'll've known.",
    "1 12 123 1234 12345 123456 3.14159 0x1F -42 1e-9 2026-11-23T16:00:00Z",
    "    \n\n\n   \t  \u00a0 \u3000end  ",
    "上下文窗口预算令牌计数压缩会话消息工具调用结果错误重试。日本語のテキスト、한국어 텍스트",
    "Привет, мир! Ελληνικά. עברית. العربية. हिन्दी भाषा. ภาษาไทย",
    "café naïve coöperate e\u0301 A\u030a \u212b ﬁ ① ²",
    "emoji 🙏✅👩‍👩‍👧‍👦 🇩🇪 ❤️ 🏳️‍🌈 end",
    '{"path": "site/index.html", "content": "<!DOCTYPE html>\\n<html lang=\\"en\\">"}',
    "<section class=\"x\"><h2>Title</h2><p>The value keeps the state.</p></section>\n",
    "Traceback (most recent call last):\n  File \"/work/app/a.py\", line 12, in f\nKeyError: 'budget'",
    "\x00\x01\x7f \ufffd \U0010ffff \ud7ff",
)
