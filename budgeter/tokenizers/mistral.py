"""Mistral tokenizers from ``mistral-common``, counted with its own exact request encoding.

mistral-common encodes a request message by message and concatenates the token lists
(``InstructTokenizerBase.encode_instruct``). ``MistralCounter`` runs the same walk with the same
flags, but memoizes each message's token count, so history is never re-tokenized. A test proves
the total equals ``len(encode_chat_completion(request).tokens)``.

A build also reuses what mistral-common made of each message on earlier builds: its converted
message (per ``Message``), and the normalizer's output for each run of same-role messages (keyed
by the converted messages it was given, which persist between builds). Each message's own checks
run once; the checks of the request's structure, the normalizer's walk and the count resume where
the request stops sharing messages with the conversation's previous one (``Walks``). Every
``audit_every``-th count is also made the plain way and compared; a difference turns the reuse
off for the profile.
A message's own cost is its encoding in a request that holds it alone, the way the newest message
of a build is encoded: the build that follows finds it normalized and counted (by the identity of
its normalized form), and neither normalizes nor tokenizes it a second time.
Tool-call ids are mapped to the 9-character alphanumeric ids Mistral requires (deterministic).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import logging
import operator
import re
import string
import types
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

from budgeter.core.counting import Adaptation, later_system
from budgeter.core.memo import CharMemo, IdentityMemo, Walks
from budgeter.core.messages import Message, to_openai, to_template
from budgeter.core.typing import JSONDict
from budgeter.errors import MissingExtra, TemplateError

_ALPHABET = string.ascii_letters + string.digits
log = logging.getLogger("budgeter.counting")


@functools.lru_cache(maxsize=65_536)
def mistral_id(call_id: str) -> str:
    """A 9-character alphanumeric id for ``call_id``, the same for the same id (kept per id: a
    call's id is mapped again for its result)."""
    if len(call_id) == 9 and call_id.isalnum() and call_id.isascii():
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    return "".join(_ALPHABET[(n >> (6 * i)) % 62] for i in range(9))


def _request_dict(m: Message) -> dict[str, Any]:
    d = to_template(m)
    for call in d.get("tool_calls", ()):
        call["id"] = mistral_id(call["id"])
    if m.role == "tool":
        d["tool_call_id"] = mistral_id(m.tool_call_id or "")
    d.pop("reasoning_content", None)
    return d


def _memo_tools(validator: Any, checked: set[tuple[str, ...]], keys: Callable[[Sequence[Any]], tuple[str, ...]]
                ) -> Any:
    """Tool schemas are checked against JSON Schema's meta-schema once per set of tools, not on
    every build (it was a third of a Mistral build). ``keys``: the tools' JSON."""
    check = validator._validate_tools

    def validate_tools(tools: list[Any]) -> None:
        key = keys(tools)
        if key not in checked:
            check(tools)
            checked.add(key)

    validator._validate_tools = validate_tools
    return validator


def _chars(m: Any) -> int:
    """Characters of a message's text: ours (``Message.size``) or mistral-common's (its content)."""
    if isinstance(m, Message):
        return m.size
    content = getattr(m, "content", None)
    return len(content) if isinstance(content, str) else 0


def _memo_messages(validator: Any) -> Any:
    """Each message is checked once per validator, by identity: mistral-common's check of a
    message by its role reads only the message (and, for an assistant message, whether it is
    the last), and a reusing build hands over the objects earlier builds checked. A message that
    fails is checked again each time (nothing is kept). (The checks of the list's structure resume
    where the list changed: ``_resume_checks``.)"""
    passed: CharMemo[tuple[Any, ...], Any] = CharMemo(200_000)  # -> the message itself, so its id stays its own
    # (not an IdentityMemo: its key tuple and a lambda per call cost what the check did)
    for name in ("_validate_user_message", "_validate_assistant_message", "_validate_tool_message",
                 "_validate_system_message"):
        check = getattr(validator, name)

        def memo(message: Any, *args: Any, _check: Any = check, _name: str = name, **kwargs: Any) -> None:
            key = (_name, id(message), *args, *kwargs.values())
            if passed.get(key) is not message:
                _check(message, *args, **kwargs)
                passed.put(key, message)

        setattr(validator, name, memo)
    return validator


def _resume_checks(validator: Any, on: Callable[[], bool]) -> Any:
    """mistral-common's checks of a message list's structure, resumed where the list stops sharing
    messages (by identity) with one the validator passed while ``on`` (a reusing build, whose
    messages are the objects earlier builds converted), for each check that is mistral-common's
    own (a subclass's override runs whole). Each check is a walk whose verdict on the shared part
    is known, and each runs over the tail of the list that holds what it has not seen:
    - the order of roles is checked pair by pair: from the last shared message;
    - every assistant message resets the count of tool results it waits for, and the check fails
      there if the count is not zero: from the message before the last shared assistant message
      (the check skips the first message of a list);
    - each message's content is checked with whether it is the last: from the last shared message.
    """
    from mistral_common.protocol.instruct.messages import Roles
    from mistral_common.protocol.instruct.validator import MistralRequestValidator as Base

    passed: Walks[None] = Walks(size=_chars)
    resume: list[tuple[Any, int]] = []  # (the list being validated, its messages shared with a passed one)

    def before_last_assistant(shared: int, messages: Any) -> int:
        return next((j for j in range(shared - 1, 0, -1) if messages[j].role == Roles.assistant), 1) - 1

    def resumed(check: Callable[[Any], None], start: Callable[[int, Any], int]) -> Callable[[Any], None]:
        def run(messages: Any) -> None:
            if resume and resume[-1][0] is messages and resume[-1][1]:
                messages = messages[start(resume[-1][1], messages):]
            check(messages)
        return run

    checks: dict[str, Callable[[int, Any], int]] = {
        "_validate_message_order": lambda shared, _: shared - 1,
        "_validate_tool_calls_followed_by_tool_messages": before_last_assistant,
        "_validate_message_list_content": lambda shared, _: shared - 1,
    }
    for name, start in checks.items():
        if getattr(type(validator), name) is getattr(Base, name):
            setattr(validator, name, resumed(getattr(validator, name), start))
    plain = validator.validate_messages

    def validate_messages(messages: list[Any]) -> None:
        if not messages or not on():
            return plain(messages)
        resume.append((messages, passed.find(messages)[1]))
        try:
            plain(messages)
        finally:
            resume.pop()
        passed.keep(messages, None)

    validator.validate_messages = validate_messages
    return validator


TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
"""The pre-tokenizer pattern of mistral-common's Tekken vocabularies, for which a lowercase ASCII
letter followed by a space is a cut (``_Lengths``)."""

SPLIT_FROM = 1024
"""The shortest text whose payload is counted apart from its envelope (``_Lengths``)."""

EDGE = 32
"""How many characters without a double quote must lie between a payload's cut and its envelope."""

CANDIDATES = 16
"""How many cuts from each end of a text are tried for its payload's ends."""

_LETTER_SPACE = re.compile("[a-z](?= )")
_SPACE_LETTER = re.compile(" (?=[a-z])")


class _Lengths:
    """mistral-common's Tekken ``encode`` shifts each id by ``num_special_tokens``, a property it
    reads once per token (half of a Mistral build's tokenizing): the same shift, read once per
    call. Its tiktoken ``Encoding`` has no special tokens (Tekken handles those itself), so its
    ``encode`` equals ``encode_ordinary``, which is faster: ``encode`` looks for special tokens
    with a pattern made of none, which matches the empty string at every character.

    While ``counting`` (a count is made) the encode returns as many ids as the text has, all zero:
    a count needs how many there are, and mistral-common's encoding of a chat message only joins
    them. Their number is kept by text (in a ``CharMemo``, the memos' budget), so a text is tokenized
    once: an appended message's text is tokenized for its cost and met again inside the build's
    encoding of the same message.

    The texts mistral-common tokenizes wrap a payload in JSON that names its call: a tool result is
    ``{"content": "...", "call_id": "..."}``, a call ``[{"name": ..., "arguments": {...}, "id":
    "..."}]``. The same payload comes back under other ids (a retried call, a file read again, a
    file's content written and then read), so a long text is counted in three parts: its head, its
    payload and its tail, the payload's count kept by its text. The payload runs from the first to
    the last cut of the text with ``EDGE`` characters free of ``"`` on its outer side: JSON's own
    quotes around the payload keep the cuts inside it, wherever its envelope puts it.

    A cut is where a lowercase ASCII letter is followed by a space. Under ``TEKKEN_PATTERN``, a
    letter can only be in a piece of the first two branches, whose letters come after at most one
    leading non-letter, so the piece holding the letter ends before the space; the pieces before
    the cut are matched alike whether the text goes on with a space or ends there (no branch that
    could reach the letter reads past a non-letter, and no branch looks behind), and the pieces
    from the cut on begin at the cut. BPE merges within a piece only: the text's count is the sum
    of its parts'. For any other pattern texts are counted whole. Every ``audit_every``-th split
    count is also made whole; a difference turns splitting off (named in ``off``)."""

    def __init__(self, tekken: Any) -> None:
        self.counting = False
        self.off = ""
        self.audit_every = 64
        self._splits = 0
        self._lengths: CharMemo[str, int] = CharMemo()
        self._model: Any = None
        self._plain = "encode"
        self._length: Callable[[str], int] = lambda s: len(self._ids(s))
        """How many ids a text encodes to."""
        if not (hasattr(tekken, "_model") and hasattr(tekken, "num_special_tokens")):
            return
        self._model = model = tekken._model
        shift = tekken.num_special_tokens
        self._plain = "encode_ordinary" if not getattr(model, "special_tokens_set", True) else "encode"
        if getattr(model, "_pat_str", None) != TEKKEN_PATTERN:
            self.off = "not Tekken's pre-tokenizer pattern: texts are counted whole"

        def encode(s: str, bos: bool, eos: bool) -> list[int]:
            tokens = [0] * self.count(s) if self.counting else [t + shift for t in self._ids(s)]
            if bos:
                tokens.insert(0, tekken.bos_id)
            if eos:
                tokens.append(tekken.eos_id)
            return tokens

        tekken.encode = encode

    def _ids(self, s: str) -> list[int]:
        return getattr(self._model, self._plain)(s)  # type: ignore[no-any-return]

    def count(self, s: str) -> int:
        """How many ids ``s`` encodes to, kept by text; a long text counted in parts."""
        return self._kept(s, split=len(s) >= SPLIT_FROM and not self.off)

    def _kept(self, s: str, *, split: bool = False) -> int:
        n = self._lengths.get(s)
        if n is None:
            cuts = self._payload(s) if split else None
            n = self._length(s) if cuts is None else self._in_parts(s, *cuts)
            self._keep(s, n)
        return n

    def _in_parts(self, s: str, a: int, b: int) -> int:
        """``s``'s count as its head's, payload's and tail's (each kept); every ``audit_every``-th
        one also counted whole, and a difference turns splitting off."""
        n = self._kept(s[:a]) + self._kept(s[a:b]) + self._kept(s[b:])
        self._splits += 1
        if self._splits % self.audit_every:
            return n
        whole = self._length(s)
        if whole != n:
            self.off = "a text counted in parts differed from its count whole: texts are counted whole"
            log.warning("budgeter: Tekken: %s (%d against %d)", self.off, n, whole)
            self._lengths.clear()
        return whole

    def _keep(self, s: str, n: int) -> None:
        if len(s) >= 64:  # (a shorter text tokenizes about as fast as it is looked up)
            self._lengths.put(s, n, len(s))

    @staticmethod
    def _payload(s: str) -> tuple[int, int] | None:
        """The first and the last cut of ``s`` with ``EDGE`` characters free of ``"`` before the
        first and after the last, at least a quarter of ``s`` apart, looked for among the first and
        the last ``CANDIDATES`` cuts (a text full of quotes, such as JSON data, has too many that
        fail); None where there are none."""
        limit = len(s) // 2
        firsts = itertools.islice(_LETTER_SPACE.finditer(s, EDGE - 1, limit), CANDIDATES)
        a = next((m.end() for m in firsts if '"' not in s[m.end() - EDGE:m.end()]), None)
        if a is None:
            return None
        lasts = itertools.islice(_SPACE_LETTER.finditer(s[::-1], EDGE, len(s) - limit), CANDIDATES)
        b = next((p for p in (len(s) - 1 - m.start() for m in lasts) if '"' not in s[p:p + EDGE]), None)
        if b is None or b - a < len(s) // 4:
            return None
        return a, b


class _RunMemo:
    """The normalizer's output for a run of same-role messages (for tool results, under
    mistral-common's own normalization, for each result by itself), by the identity of the converted
    messages it was given (they persist between builds); and its walk over the request resumed
    where the request stops sharing messages with the last one of the same conversation. On only
    while ``on``: the plain path (``full_tokens``, the audit) normalizes afresh."""

    def __init__(self, normalizer: Any) -> None:
        from mistral_common.protocol.instruct.messages import Roles
        from mistral_common.protocol.instruct.normalize import InstructRequestNormalizer as Base

        self.on = False
        self.alone = False
        """With ``on``: a request holding one message to price, not a build of a conversation (its
        walk is neither resumed nor kept: the conversation's next build resumes its own).
        Both are set only inside ``reusing``."""
        self._runs = IdentityMemo(limit=50_000)
        self._walks: Walks[_Walk] = Walks(size=_chars)
        self._normalizer = normalizer
        self._empty_user: Any = None
        aggregate = normalizer._aggregate_role
        # mistral-common's own role dispatch hands the latest call ids to tool runs only, and its
        # own tool normalization makes each tool message on its own from it alone (no reordering)
        own_roles = type(normalizer)._aggregate_role is Base._aggregate_role
        own_tools = own_roles and type(normalizer)._aggregate_tool_messages is Base._aggregate_tool_messages

        def aggregate_role(messages: list[Any], role: Any, latest_call_ids: list[str]) -> Any:
            if not self.on or not messages:
                return aggregate(messages, role, latest_call_ids)
            if role == Roles.tool and own_tools:  # message by message: a result priced alone is
                out: list[Any] = []               # the one its build meets in its run
                for message in messages:
                    out.extend(self._runs.get((message,), aggregate, [message], role, [], key=(role, ())))
                return out
            ids = tuple(latest_call_ids) if role == Roles.tool or not own_roles else ()
            return self._runs.get(tuple(messages), aggregate, list(messages), role, list(latest_call_ids),
                                  key=(role, ids))

        normalizer._aggregate_role = aggregate_role
        if type(normalizer)._aggregate_messages is Base._aggregate_messages:
            plain = normalizer._aggregate_messages  # (a subclass with its own walk keeps it)
            normalizer._aggregate_messages = lambda messages: (
                self._aggregate(messages) if self.on and messages else plain(messages))
        if type(normalizer)._aggregate_system_prompts is Base._aggregate_system_prompts:
            systems = normalizer._aggregate_system_prompts  # (it skips every other message itself)
            normalizer._aggregate_system_prompts = lambda messages: systems(
                _systems(messages) if self.on else messages)
        if type(normalizer)._build_instruct_request is Base._build_instruct_request:
            build = normalizer._build_instruct_request
            blank = _Blank(normalizer._instruct_request_class)

            def build_instruct_request(messages: list[Any], system_prompt: Any, request: Any, settings: Any) -> Any:
                if not self.on:
                    return build(messages=messages, system_prompt=system_prompt, request=request, settings=settings)
                return blank(messages=messages, system_prompt=system_prompt, available_tools=request.tools,
                             settings=settings)

            normalizer._build_instruct_request = build_instruct_request

    @contextlib.contextmanager
    def reusing(self, on: bool = True, *, alone: bool = False) -> Iterator[None]:
        """Inside: the normalizer (and the validators' resumed checks) reuse earlier work if
        ``on``; ``alone``: for a request that prices one message."""
        self.on, self.alone = on, on and alone
        try:
            yield
        finally:
            self.on = self.alone = False

    def _aggregate(self, messages: list[Any]) -> list[Any]:
        """``InstructRequestNormalizer._aggregate_messages``, walked from the start of the last run
        that begins before the first message this request does not share (by identity) with the
        conversation's previous request: every run before it is that request's output."""
        from mistral_common.protocol.instruct.messages import Roles

        normalizer = self._normalizer
        last, shared = self._walks.find(messages) if not self.alone else (None, 0)
        resume: tuple[int, int, tuple[str, ...]] = (0, 0, ())
        if last is not None:
            resume = next((mark for mark in reversed(last.marks) if mark[0] < shared), resume)
        start, kept, ids = resume
        outputs, before = (last.outputs, last.marks) if last is not None else ([], [])
        out = outputs[:kept]
        marks = before[:bisect.bisect_left(before, start, key=_MARK_INDEX)]  # (in index order)
        call_ids = list(ids)
        run: list[Any] = []
        role: Any = None
        weight: Any = None
        for index in range(start, len(messages)):
            message = messages[index]
            new_weight = getattr(message, "weight", None) if _weighted(message.__class__) else None
            if role != message.role or new_weight != weight:
                if run:
                    out.extend(normalizer._aggregate_role(run, role, call_ids))
                    if role == Roles.assistant:
                        call_ids.extend(call.id for call in out[-1].tool_calls or ())
                    elif role == Roles.tool:
                        call_ids.clear()  # reordering depends only on the latest assistant message
                marks.append((index, len(out), tuple(call_ids)))
                run = []
            role, weight = message.role, new_weight
            run.append(message)
        if run:
            out.extend(normalizer._aggregate_role(run, role, call_ids))
        if not self.alone:
            self._walks.keep(messages, _Walk(marks, out))
        if not out or (not normalizer._system_prompt_in_begin and out[0].role != Roles.user):
            if self._empty_user is None:  # one object: its count is then looked up by identity
                self._empty_user = normalizer._user_message_class(content="")
            out = [self._empty_user, *out]
        else:
            out = list(out)
        return out


@functools.cache
def _weighted(kind: type) -> bool:
    """Whether messages of ``kind`` may carry a ``weight``: a field of its, an extra attribute
    where its model allows extras, or any attribute of a class that is not a pydantic model. The
    normalizer reads each message's weight with ``getattr(message, "weight", None)``; on a
    pydantic model without the field that raises and catches an AttributeError inside pydantic's
    ``__getattr__``, the costliest step of its walk (a third of it)."""
    fields = getattr(kind, "model_fields", None)
    extra = getattr(kind, "model_config", {}).get("extra")
    return not isinstance(fields, dict) or "weight" in fields or hasattr(kind, "weight") or extra == "allow"


class _Blank:
    """A pydantic request of mistral-common's with the given fields, made as a copy of one it
    validated once with no messages, instead of validated afresh: its validation checks every
    message again on each build (pydantic runs each message's own validators again, a quarter of a
    reusing count), though the messages are the objects validated when converted or normalized,
    unchanged since. Its other fields keep the values its validation gave."""

    def __init__(self, cls: Any) -> None:
        self._blank = cls(messages=[])

    def __call__(self, **fields: Any) -> Any:
        return self._blank.model_copy(update=fields)


_ROLE = operator.attrgetter("role")
_MARK_INDEX = operator.itemgetter(0)


def _first_last_user(messages: Sequence[Any], user_class: type) -> tuple[int, int]:
    """``InstructTokenizerBase.find_first_last_user``: the indexes of the first and last user
    message (-1 and -1 without one), found by the messages' roles in passes in C instead of a
    walk in Python: each build of a ``mistral-tekken`` conversation walked every message for them
    and for the system prompt, twice (``bench_service --profiles mistral-tekken``). A user message
    is the only kind whose role is the user's; the two found are checked to be of that class, and
    mistral-common's own walk decides otherwise."""
    from mistral_common.protocol.instruct.messages import Roles

    roles = list(map(_ROLE, messages))
    if Roles.user not in roles:
        first = last = -1
    else:
        first, last = roles.index(Roles.user), len(roles) - 1 - roles[::-1].index(Roles.user)
    if first >= 0 and not (isinstance(messages[first], user_class) and isinstance(messages[last], user_class)):
        from mistral_common.tokens.tokenizers.instruct import InstructTokenizerBase

        walk: Any = InstructTokenizerBase.find_first_last_user  # (it reads the request's messages alone)
        first, last = walk(types.SimpleNamespace(messages=messages))
    return first, last


def _systems(messages: Sequence[Any]) -> list[Any]:
    """The system messages of ``messages``, in order, found by their roles in C (what
    ``_aggregate_system_prompts`` walks them all in Python for)."""
    from mistral_common.protocol.instruct.messages import Roles

    roles = list(map(_ROLE, messages))
    out = []
    at = -1
    with contextlib.suppress(ValueError):  # (no system message after the last one found)
        while True:
            at = roles.index(Roles.system, at + 1)
            out.append(messages[at])
    return out


class _Walk:
    """One walk of the normalizer: where each run started (index, outputs before it, the latest
    call ids then) and its output (before an empty user message is put first)."""

    __slots__ = ("marks", "outputs")

    def __init__(self, marks: list[tuple[int, int, tuple[str, ...]]], outputs: list[Any]) -> None:
        self.marks, self.outputs = marks, outputs


class _Counted:
    """One count of a normalized request: what its messages' flags depend on (the first and last
    user message, the system prompt, the tools' JSON) and ``sums[i]``, the tokens before message
    ``i`` (``sums[0]``: the start)."""

    __slots__ = ("first", "last", "system_prompt", "tools", "sums")

    def __init__(self, first: int, last: int, system_prompt: Any, tools: tuple[str, ...], sums: list[int]) -> None:
        self.first, self.last, self.system_prompt, self.tools, self.sums = first, last, system_prompt, tools, sums


def _flag_blind(instruct: Any) -> tuple[bool, bool]:
    """Whether ``instruct``'s tool-result and assistant encoders ignore their
    ``is_before_last_user_message`` flag: mistral-common's own V1, V3, V7 and V13 methods do (only
    V2's read it), known by the method's identity, so a subclass that overrides one reads as
    flag-dependent. A message such an encoder writes is counted once, whatever its place against
    the last user message."""
    from mistral_common.tokens.tokenizers import instruct as versions

    def methods(name: str) -> set[Any]:
        return {getattr(getattr(versions, cls), name, None)
                for cls in ("InstructTokenizerV1", "InstructTokenizerV3", "InstructTokenizerV7",
                            "InstructTokenizerV13")} - {None}

    kind = type(instruct)
    return (kind.encode_tool_message in methods("encode_tool_message"),
            kind.encode_assistant_message in methods("encode_assistant_message"))


class MistralCounter:
    def __init__(self, tokenizer: Any, *, name: str) -> None:
        self.name = name
        self._tok = tokenizer
        self._memo: CharMemo[tuple[Any, ...], int] = CharMemo()
        self._same = IdentityMemo(limit=200_000)
        """A normalized message's count under its flags, by the message's identity (reuse only)."""
        self._counted_walks: Walks[_Counted] = Walks(size=_chars)
        """Recent counts of reusing builds, resumed by the builds that extend them."""
        self._costs: CharMemo[Message, int] = CharMemo()
        self._finetuning: Any = None
        self._checked: set[tuple[str, ...]] = set()
        self._tools_json = IdentityMemo(limit=64)
        self._memoized(tokenizer._chat_completion_request_validator)
        self._converted: CharMemo[Message, Any] = CharMemo()
        self._as_user: CharMemo[Message, Message] = CharMemo()
        self._conversions: Walks[list[Any]] = Walks(size=_chars)
        """Reusing builds' converted message lists, extended by the builds that share their start."""
        self._tools: tuple[Sequence[JSONDict], list[Any] | None] = ((), None)
        self._runs = _RunMemo(tokenizer._instruct_request_normalizer)
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        self._request = _Blank(ChatCompletionRequest)
        """Reusing builds' ``ChatCompletionRequest``."""
        self._lengths = _Lengths(tokenizer.instruct_tokenizer.tokenizer)
        self._blind = _flag_blind(tokenizer.instruct_tokenizer)
        """Whether tool results and assistant messages encode alike before and after the last user
        message (then they are counted under no flags, so a new user turn finds them counted)."""
        from mistral_common.tokens.tokenizers.instruct import InstructTokenizerBase

        self._own_first_last = (type(tokenizer.instruct_tokenizer).find_first_last_user
                                is InstructTokenizerBase.find_first_last_user)
        """Whether the instruct tokenizer finds the first and last user message with mistral-common's
        own walk (``_first_last_user`` finds the same two in C)."""
        self.audit_every = 64
        self._counts = 0
        self.off = ""
        """Why builds no longer reuse mistral-common's earlier work ('' while they do)."""

    adaptations = (Adaptation("system_as_user", "a system message right after an assistant message or a tool "
                              "result (mistral-common refuses it) is counted and sent as a user message"),)

    @property
    def notes(self) -> tuple[str, ...]:
        notes = ["mistral-common request encoding (exact, memoized per message)", self.adaptations[0].note,
                 "count backend: tiktoken"]
        if self.off:
            notes.append(f"renders: {self.off}")
        if self._lengths.off:
            notes.append(f"tokenizing: {self._lengths.off}")
        return tuple(notes)

    def _json(self, tools: Sequence[Any]) -> tuple[str, ...]:
        """mistral-common's tools as JSON, made once per list of the same tool objects (a reusing
        build's tools are the objects converted on the first)."""
        return self._tools_json.get(tuple(tools), lambda: tuple(t.model_dump_json() for t in tools))

    def _memoized(self, validator: Any) -> Any:
        """``validator`` with its tool and per-message checks memoized (both validators share the
        set of checked tools)."""
        return _resume_checks(_memo_messages(_memo_tools(validator, self._checked, self._json)),
                              lambda: self._runs.on)

    @classmethod
    def builtin(cls, filename: str, *, name: str) -> MistralCounter:
        try:
            from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        except ImportError as exc:
            if not MissingExtra.explains(exc, "mistral"):
                raise
            raise MissingExtra(f"the {name} tokenizer", "mistral") from exc

        path = resources.files("mistral_common") / "data" / filename
        return cls(MistralTokenizer.from_file(str(path)), name=name)

    def _instruct(self, messages: Sequence[Message], tools: Sequence[JSONDict], *, reuse: bool = False) -> Any:
        """mistral-common's instruct request for the conversation. ``reuse``: built from the
        messages converted and normalized on earlier builds (the same objects mistral-common
        made then); otherwise afresh from the OpenAI form, as mistral-common's own entry does."""
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        messages = self._placed(messages)
        try:
            with self._runs.reusing(reuse):
                if reuse:
                    req = self._request(messages=self._converts(messages),
                                        tools=self._convert_tools(tools))
                else:
                    req = ChatCompletionRequest.from_openai([_request_dict(m) for m in messages], list(tools) or None)
                valid = self._validator(messages).validate_request(req)
                return self._tok._instruct_request_normalizer.from_chat_completion_request(valid)
        except Exception as exc:
            raise TemplateError(f"mistral-common rejects this conversation: {exc}") from exc

    def _placed(self, messages: Sequence[Message]) -> Sequence[Message]:
        """mistral-common refuses a system message right after an assistant message or a tool
        result, and history is append-only, so such a message is encoded as a user message with the
        same content (the same object each time, so builds still meet known messages); the proxy
        sends it so (``adapter``)."""
        if not later_system(messages):
            return messages
        at = [i for i in range(1, len(messages)) if messages[i].role == "system"
              and messages[i - 1].role in ("assistant", "tool")]
        if not at:
            return messages
        out = list(messages)
        for i in at:
            m = out[i]
            got = self._as_user.get(m)
            if got is None:
                got = self._as_user.put(m, dataclasses.replace(m, role="user"), m.size)
            out[i] = got
        return out

    def sent(self, messages: Sequence[Message], tools: Sequence[JSONDict], memo: Any = None,
             ) -> tuple[list[dict[str, Any]], Sequence[JSONDict]] | None:
        """The messages as counted (``_placed``) where that moved a system message; None otherwise."""
        placed = self._placed(messages)
        return None if placed is messages else ([to_openai(m) for m in placed], tools)

    def _converts(self, messages: Sequence[Message]) -> list[Any]:
        """Each message converted, those the previous build of the conversation shared taken from
        its list (by identity) instead of looked up one by one."""
        held, shared = self._conversions.find(messages)
        out = held[:shared] if held is not None else []
        out += [self._convert(m) for m in messages[shared:]]
        if messages:
            self._conversions.keep(messages, out)
        return list(out)

    def _convert(self, m: Message) -> Any:
        got = self._converted.get(m)
        if got is None:
            from mistral_common.protocol.instruct.converters import convert_openai_messages

            got = self._converted.put(m, convert_openai_messages([_request_dict(m)])[0], m.size)
        return got

    def _convert_tools(self, tools: Sequence[JSONDict]) -> list[Any] | None:
        source, converted = self._tools
        if source is not tools and list(source) != list(tools):
            from mistral_common.protocol.instruct.converters import convert_openai_tools

            converted = convert_openai_tools(list(tools)) if tools else None
            self._tools = (tools, converted)
        return converted

    def _validator(self, messages: Sequence[Message]) -> Any:
        """A conversation that ends with an assistant message (a transcript being profiled, or a
        final answer) is not a serving request; it is counted as mistral-common tokenizes it for
        fine-tuning: the same messages, the last one closed with EOS."""
        default = self._tok._chat_completion_request_validator
        if not messages or messages[-1].role != "assistant":
            return default
        if self._finetuning is None:
            from mistral_common.protocol.instruct.validator import ValidationMode

            self._finetuning = self._memoized(type(default)(mode=ValidationMode.finetuning))
        return self._finetuning

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> int:
        self._counts += 1
        if self.off:
            return self._count(self._instruct(messages, tools))
        total = self._count(self._instruct(messages, tools, reuse=True), reuse=True)
        if self._counts % self.audit_every == 0:
            plain = self._count(self._instruct(messages, tools))
            if plain != total:
                self.off = "a count reusing earlier builds differed from mistral-common's own: reuse is off"
                log.warning("budgeter: %s: %s (%d against %d)", self.name, self.off, total, plain)
                return plain
        return total

    def _count(self, request: Any, *, reuse: bool = False, walk: bool = True) -> int:
        """The request's token count, message by message. ``reuse``: the request's messages are
        the objects earlier builds normalized, so a message seen before with the same flags is
        looked up by identity instead of by its JSON, and the walk starts where the request stops
        sharing messages with the conversation's previous one, or where a message's flags change:
        a message's flags depend only on its place against the first and last user message, the
        system prompt and (for the last user message) the tools. ``walk=False``: a request that
        prices one message, which no build extends (its walk is neither resumed nor kept)."""
        from mistral_common.protocol.instruct.messages import (
            AssistantMessage,
            ToolMessage,
            UserMessage,
        )

        it = self._tok.instruct_tokenizer
        messages = request.messages
        first, last = (_first_last_user(messages, UserMessage) if reuse and self._own_first_last
                       else it.find_first_last_user(request))
        tools = self._json(request.available_tools or ())
        sums = [len(it.start())]
        start = 0
        if reuse and walk:
            held, shared = self._counted_walks.find(messages)
            if held is not None and held.first == first and held.system_prompt == request.system_prompt:
                start = shared if (held.last, held.tools) == (last, tools) else max(0, min(shared, held.last, last))
                sums = held.sums[:start + 1]
        total = sums[-1]
        for idx in range(start, len(messages)):
            msg = messages[idx]
            if isinstance(msg, UserMessage):
                is_last = idx == last
                flags: tuple[Any, ...] = (is_last, idx == first, request.system_prompt, tools if is_last else ())
                fn = lambda m=msg, f=flags, r=request: it.encode_user_message(  # noqa: E731
                    m, r.available_tools, f[0], f[1], system_prompt=r.system_prompt,
                    force_img_first=True, settings=r.settings)[0]
            elif isinstance(msg, ToolMessage):
                flags = () if self._blind[0] else (idx < last,)
                fn = lambda m=msg, b=idx < last: it.encode_tool_message(m, b)[0]  # type: ignore[misc,assignment]  # noqa: E731
            elif isinstance(msg, AssistantMessage):
                flags = () if self._blind[1] else (idx < last,)
                fn = lambda m=msg, b=idx < last: it.encode_assistant_message(  # type: ignore[misc,assignment]  # noqa: E731
                    message=m, is_before_last_user_message=b)
            else:
                flags = ()
                fn = lambda m=msg: it.encode_system_message(m)[0]  # type: ignore[misc,assignment]  # noqa: E731
            if reuse:
                total += self._same.get((msg,), self._counted, msg, flags, fn, key=flags)
            else:
                total += self._counted(msg, flags, fn)
            sums.append(total)
        if reuse and walk and messages:
            self._counted_walks.keep(messages, _Counted(first, last, request.system_prompt, tools, sums))
        return total

    def _counted(self, msg: Any, flags: tuple[Any, ...], encode: Any) -> int:
        """The count of a normalized message under its flags, memoized by its JSON."""
        key = (type(msg).__name__, msg.model_dump_json(), flags)
        n = self._memo.get(key)
        if n is None:
            n = self._memo.put(key, self._how_many(encode), len(key[1]))
        return n

    def _how_many(self, encode: Callable[[], Sequence[int] | None]) -> int:
        """How many ids ``encode()`` makes, made with the Tekken encode counting only (see
        ``_Lengths``)."""
        self._lengths.counting = True
        try:
            return len(encode() or ())
        finally:
            self._lengths.counting = False

    def full_tokens(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> list[int]:
        """mistral-common's own encoding of the whole request (for proofs and tests)."""
        return list(self._tok.instruct_tokenizer.encode_instruct(self._instruct(messages, tools)).tokens)

    def render(self, messages: Sequence[Message], tools: Sequence[JSONDict]) -> str:
        """The encoded request as text, control tokens kept (what ``budgeter render`` prints)."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        tokens = self.full_tokens(messages, tools)
        return str(self._tok.instruct_tokenizer.tokenizer.decode(tokens, special_token_policy=SpecialTokenPolicy.KEEP))

    def count_text(self, text: str) -> int:
        return self._how_many(lambda: self._tok.instruct_tokenizer.tokenizer.encode(text, bos=False, eos=False))

    def export_cost(self, message: Message) -> tuple[int, list[int]]:
        return self.message_cost(message), []

    def import_cost(self, message: Message, cost: int, counts: Sequence[int]) -> None:
        if message not in self._costs:
            self._costs.put(message, int(cost), message.size)

    def message_cost(self, message: Message) -> int:
        """The message's tokens in mistral-common's encoding of a request holding it alone (after
        the empty user turn mistral-common puts first where a request does not start with one), as
        a template counter prices a message rendered alone. That is how a build encodes its newest
        message, so the build that follows finds the message normalized and counted (``_alone``).
        A message mistral-common cannot encode alone (an assistant message with both text and tool
        calls) is priced by its text plus 4 tokens."""
        cost = self._costs.get(message)
        if cost is None:
            cost = self._costs.put(message, self._alone(message), message.size)
        return cost

    def _alone(self, message: Message) -> int:
        """Priced the way a reusing build meets the message (unless reuse is off): the request is
        a copy of one validated once; the message's normalized form is the object the build's
        normalizer finds for it (a tool result's by itself, another message's as a run of one)
        and its count is kept by that object's identity, so the build neither normalizes it again
        nor serializes it to look its count up."""
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        normalizer = self._tok._instruct_request_normalizer
        try:
            if self.off:
                request = ChatCompletionRequest(messages=[self._convert(message)])
                return self._count(normalizer.from_chat_completion_request(request))
            with self._runs.reusing(alone=True):
                instruct = normalizer.from_chat_completion_request(self._request(messages=[self._convert(message)]))
            return self._count(instruct, reuse=True, walk=False)
        except Exception:
            text = message.content + "".join(c.name + c.arguments for c in message.tool_calls)
            return self.count_text(text) + 4
