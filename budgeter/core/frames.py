"""A message's render alone, made from a frame traced once per shape of message.

A build prices each appended message by rendering it alone with the chat template (its cost, and
the vehicle that tokenizes its new text once). Jinja's fixed cost per render (a new context, the
template's namespaces and macros, its preamble) is most of that render for a short message, and a
loaded replica spends about a seventh of its time there. Messages of one shape render alike: the
template joins their text with literals, trims it, and decides a few things by testing it.

A message's **shape** is its template dict with every string stood in for, except ``role`` and
``type``, empty strings and the keys of dicts (which stay as they are, like numbers, booleans and
None): a tool result of any text has the shape of every other tool result, a call to
``read_file`` with a ``path`` that of every other such call. The second time ``Frames`` meets a
shape (a shape met once may never come back), it renders the message with a **traced** copy of
the template, the strings stood in for by ``Sym`` values that record what the template does with
them:
- concatenation and ``strip``/``lstrip``/``rstrip`` (and the ``trim`` filter) build an expression
  of the fields;
- a few tests of a value (truth, ``"x" in value``, ``startswith``/``endswith``, ``==``/``!=``
  against a literal, its length) are answered for the stand-in and kept as **guards**;
- every other use of one (a slice, another method, iteration, hashing, ordering, a filter or a
  function reading it, ``str()`` of it outside the template's own output) raises ``Untraceable``,
  and messages of that shape are rendered by the template, as before.
The expression is the render of every message of the shape whose fields answer each guard as the
stand-ins did: its text is the expression evaluated on the message's strings, with no template
run. A message that answers a guard otherwise is rendered by the template.

What a trace could miss is a use of a field that Python carries out in C without asking the value:
``field in "literal"`` (``str.__contains__`` of the literal), and C functions handed the field by
a call, a filter or a test. The traced template's calls, filters and tests refuse a ``Sym``
anywhere in their arguments (``trim`` and ``string`` take it as their value, structural filters
such as ``length`` and ``items`` a container holding one, tests of the type answer for any
string), its output joins and ``str`` are its own, and a template with ``in`` after anything but
a literal is not traced at all (checked on its syntax tree). A C function that copies the text
(``~``, ``join``, ``tojson``) is caught where it shows: a stand-in's text in a literal of the
result. Every ``audit_every``-th framed render is also rendered by the template and compared; a
difference turns frames off for the profile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("budgeter.counting")

_tracing = threading.local()
"""``guards``: the list a trace in this thread records its guards in (absent outside a trace)."""

MARK = "zq7tr"
"""Every stand-in's text starts with it: found in a literal of a traced result, a field was copied
by something the trace did not see."""
CONCRETE = frozenset({"role", "type"})
"""Keys whose string values are part of a message's shape (templates compare them)."""


class Untraceable(Exception):
    """The template uses a field in a way a frame cannot reproduce."""


@dataclass(frozen=True, slots=True)
class _Var:
    slot: int


@dataclass(frozen=True, slots=True)
class _Cat:
    parts: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Strip:
    node: Any
    how: str
    chars: str | None


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise Untraceable("a field is read")


def _guard(sym: Sym, test: str, args: tuple[Any, ...], answer: Any) -> Any:
    guards = getattr(_tracing, "guards", None)
    if guards is None:
        raise Untraceable("a stand-in outside a trace")
    guards.append((sym.node, test, args, answer))
    return answer


def _plain(x: Any) -> bool:
    return type(x) is str or (type(x) is tuple and all(type(i) is str for i in x))


class Sym(str):
    """A stand-in for a string field: its text is the stand-in text, ``node`` what it was made of."""

    node: Any

    def __new__(cls, text: str, node: Any) -> Sym:
        obj = str.__new__(cls, text)
        obj.node = node
        return obj

    def __add__(self, other: Any) -> Sym:  # type: ignore[override]
        if type(other) is not str and not isinstance(other, Sym):
            raise Untraceable("a field is added to a non-string")
        return joined((self, other))

    def __radd__(self, other: Any) -> Sym:
        if type(other) is not str:
            raise Untraceable("a field is added to a non-string")
        return joined((other, self))

    def _strip(self, how: str, chars: Any) -> Sym:
        if chars is not None and type(chars) is not str:
            raise Untraceable("strip by a field")
        return Sym(getattr(str, how)(self, chars), _Strip(self.node, how, chars))

    def strip(self, chars: Any = None) -> Sym:  # type: ignore[override]
        return self._strip("strip", chars)

    def lstrip(self, chars: Any = None) -> Sym:  # type: ignore[override]
        return self._strip("lstrip", chars)

    def rstrip(self, chars: Any = None) -> Sym:  # type: ignore[override]
        return self._strip("rstrip", chars)

    def __bool__(self) -> bool:
        return _guard(self, "bool", (), bool(str.__len__(self)))  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return _guard(self, "len", (), str.__len__(self))  # type: ignore[no-any-return]

    def __contains__(self, x: Any) -> bool:  # type: ignore[override]
        if type(x) is not str:
            raise Untraceable("a field is searched for a non-literal")
        return _guard(self, "contains", (x,), str.__contains__(self, x))  # type: ignore[no-any-return]

    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        if len(args) != 1 or not _plain(args[0]):
            raise Untraceable("startswith of a non-literal")
        return _guard(self, "startswith", args, str.startswith(self, args[0]))  # type: ignore[no-any-return]

    def endswith(self, *args: Any) -> bool:  # type: ignore[override]
        if len(args) != 1 or not _plain(args[0]):
            raise Untraceable("endswith of a non-literal")
        return _guard(self, "endswith", args, str.endswith(self, args[0]))  # type: ignore[no-any-return]

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        if type(other) is not str:
            raise Untraceable("a field is compared with a non-literal")
        return _guard(self, "eq", (other,), str.__eq__(self, other))  # type: ignore[no-any-return]

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        return not self.__eq__(other)

    __hash__ = _refuse  # type: ignore[assignment]


def _answer(text: str, test: str, args: tuple[Any, ...]) -> Any:
    if test == "bool":
        return bool(text)
    if test == "len":
        return len(text)
    if test == "contains":
        return args[0] in text
    if test == "eq":
        return text == args[0]
    return getattr(text, test)(*args)  # startswith, endswith


_KEPT = {"__new__", "__init__", "__getattribute__", "__setattr__", "__delattr__", "__init_subclass__",
         "__subclasshook__", "__class__", "__dir__", "__sizeof__", "__reduce__", "__reduce_ex__",
         "__getstate__", "__doc__"}
# Refused: ordering, slicing, iteration, every other method, and str(), repr() and format() (the
# traced template's output has its own str)
for _name in dir(str):
    if _name not in _KEPT and _name not in Sym.__dict__ and callable(getattr(str, _name)):
        setattr(Sym, _name, _refuse)


def joined(parts: Sequence[Any]) -> Sym:
    """Strings and stand-ins joined: one expression of their parts, adjacent literals merged."""
    nodes: list[Any] = []
    for p in parts:
        node = p.node if isinstance(p, Sym) else p
        for n in node.parts if type(node) is _Cat else (node,):
            if type(n) is str:
                if not n:
                    continue
                if nodes and type(nodes[-1]) is str:
                    nodes[-1] += n
                    continue
            nodes.append(n)
    return Sym("".join([str.__str__(p) if isinstance(p, Sym) else p for p in parts]), _Cat(tuple(nodes)))


def _evaluate(node: Any, values: Sequence[str]) -> str:
    kind = type(node)
    if kind is str:
        return node  # type: ignore[no-any-return]
    if kind is _Var:
        return values[node.slot]
    if kind is _Cat:
        return "".join([_evaluate(p, values) for p in node.parts])
    text = _evaluate(node.node, values)
    return getattr(text, node.how)(node.chars)  # type: ignore[no-any-return]


def _literals(node: Any) -> Iterator[str]:
    if type(node) is str:
        yield node
    elif type(node) is _Cat:
        for p in node.parts:
            yield from _literals(p)
    elif type(node) is _Strip:
        yield from _literals(node.node)
        if node.chars:
            yield node.chars


def holds(x: Any, depth: int = 0) -> bool:
    """Whether ``x`` is a stand-in or holds one (in containers and namespaces)."""
    if isinstance(x, Sym):
        return True
    if depth > 8:
        return True  # deeper than any message: treat as holding one
    if isinstance(x, Mapping):
        return any(holds(k, depth + 1) or holds(v, depth + 1) for k, v in x.items())
    if isinstance(x, (list, tuple, set, frozenset)):
        return any(holds(v, depth + 1) for v in x)
    try:  # a jinja namespace's attributes (read past its own __getattribute__, and an Undefined's)
        attrs = object.__getattribute__(x, "_Namespace__attrs")
    except AttributeError:
        return False
    return isinstance(attrs, dict) and holds(attrs, depth + 1)


MAX_MESSAGES = 16
"""Longer lists render by the template: their shapes rarely come back (a whole conversation)."""

Render = Callable[[list[Mapping[str, Any]], Any, bool], str]
"""(template dicts, tools or None, add_generation_prompt) -> text."""


class Frames:
    """One profile's frames, by the shape of what is rendered: the messages' template dicts, the
    tools (concrete, by the key the caller gives them), the generation prompt and the date."""

    def __init__(self, render: Render, *, limit: int = 4096, audit: Render | None = None,
                 audit_every: int = 64) -> None:
        self._render = render
        """Renders with the traced template."""
        self._audit = audit
        self.audit_every = audit_every
        self._frames: dict[tuple[Any, ...], Any] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self._limit = limit
        self.framed = 0
        self.off = ""

    def text(self, d: Mapping[str, Any], stamp: tuple[Any, ...] = ()) -> str | None:
        """The message's render alone (no tools, no generation prompt), or None where it is not
        made from a frame."""
        return self.render([d], None, None, False, stamp)

    def render(self, dicts: Sequence[Mapping[str, Any]], tools: Any, tools_key: Any, gen: bool,
               stamp: tuple[Any, ...] = ()) -> str | None:
        """The render of ``dicts`` (with ``tools``, known by ``tools_key``), or None where it is
        not made from a frame."""
        if self.off or len(dicts) > MAX_MESSAGES:
            return None
        values: list[str] = []
        try:
            shape = (tuple([_shape(d, values, "", 0) for d in dicts]), tools_key, gen, stamp)
        except Untraceable:
            return None
        frame = self._frames.get(shape)
        if frame is None:
            if shape not in self._seen:  # a shape met once may never come back: trace it the
                if len(self._seen) >= self._limit:  # second time
                    self._seen.clear()
                self._seen.add(shape)
                return None
            frame = self._trace(dicts, tools, gen)
            if len(self._frames) >= self._limit:
                self._frames.clear()
            self._frames[shape] = frame
        if frame is _NO:
            return None
        node, guards = frame
        for at, test, args, answer in guards:
            if _answer(_evaluate(at, values), test, args) != answer:
                return None  # these messages take another branch of the template
        text = _evaluate(node, values)
        self.framed += 1
        if self._audit is not None and self.framed % self.audit_every == 0:
            try:
                plain: str | None = self._audit(list(dicts), tools, gen)
            except Exception:  # the template refuses what its traced copy rendered
                plain = None
            if plain != text:
                self.off = "a framed render differed from the template's: frames are off"
                log.warning("budgeter: %s", self.off)
                return plain
        return text

    def _trace(self, dicts: Sequence[Mapping[str, Any]], tools: Any, gen: bool) -> Any:
        slots = [0]
        stand_in = [_stand_in(d, "", slots) for d in dicts]
        guards: list[tuple[Any, str, tuple[Any, ...], Any]] = []
        _tracing.guards = guards
        try:
            out = self._render(stand_in, tools, gen)
        except Exception:  # Untraceable, or a template that refuses these messages
            return _NO
        finally:
            del _tracing.guards
        node = out.node if isinstance(out, Sym) else out if type(out) is str else None
        if node is None or any(MARK in lit for lit in _literals(node)) or any(
                MARK in a for _, _, args, _ in guards for a in _strings(args)):
            return _NO
        return node, tuple(guards)


def _strings(args: tuple[Any, ...]) -> Iterator[str]:
    for a in args:
        if type(a) is tuple:
            yield from a
        else:
            yield a


def _shape(x: Any, values: list[str], key: str, depth: int) -> Any:
    """``x``'s shape (strings out, but those under ``CONCRETE`` keys), its strings appended to
    ``values`` in the order the stand-ins number them."""
    kind = type(x)
    if kind is str:
        if key in CONCRETE or not x:  # (an empty string is part of the shape: templates test it)
            return x
        values.append(x)
        return str
    if kind is dict:
        if depth > 6:
            raise Untraceable("nested too deeply")
        return (dict, tuple([(k, _shape(v, values, k, depth + 1)) for k, v in x.items()]))
    if x is None or kind is bool or kind is int or kind is float:
        return (kind, repr(x))  # (by its text: -0.0 == 0.0, but their JSON differs)
    if kind is list:
        if depth > 6:
            raise Untraceable("nested too deeply")
        return (list, tuple([_shape(v, values, "", depth + 1) for v in x]))
    raise Untraceable(f"a {kind.__name__} in a message")


def _stand_in(x: Any, key: str, slots: list[int]) -> Any:
    """``x`` with its strings stood in for, numbered as ``_shape`` lists them."""
    kind = type(x)
    if kind is str:
        if key in CONCRETE or not x:
            return x
        slot = slots[0]
        slots[0] += 1
        return Sym(f"{MARK}{slot}q", _Var(slot))
    if kind is dict:
        return {k: _stand_in(v, k, slots) for k, v in x.items()}
    if kind is list:
        return [_stand_in(v, "", slots) for v in x]
    return x


_NO = object()
