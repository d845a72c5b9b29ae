# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How Nomad's HTTP agent reads query parameters: booleans with Go's ``strconv.ParseBool``
(``command/agent/http.go`` ``parseBool``), paging tokens (``nomad/state/paginator`` ``CreateIndexAndIDTokenizer``:
``<CreateIndex>.<ID>``) and the ``filter`` expression.

The filter is go-bexpr's ``Field == "v"``, ``!=``, ``"v" in Field`` / ``"v" not in Field`` (a map's keys, a
list's elements, a string's substrings, as go-bexpr's ``in``), ``and``, ``or``, ``not`` and parentheses over
top-level fields. Nomad evaluates it against the whole object of the table, not the stub it returns (the
node list filters full nodes: ``nomad/state/paginator/paginator.go`` evaluates ``raw``, then ``Node.Stub``).

What it does not model: the rest of go-bexpr (``contains``, ``matches``, ``is empty``, selectors into nested
fields are a 400 here).
"""

from __future__ import annotations

import json
import re
import typing as t

from .http_shell import BadRequest

_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def go_parse_bool(name: str, value: t.Optional[str]) -> t.Optional[bool]:
    """Go's strconv.ParseBool, as Nomad parses boolean query parameters."""
    if value is None or value == "":
        return None
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise BadRequest(400, 'Failed to parse value of "%s" (%s) as a bool: strconv.ParseBool: parsing "%s": invalid syntax'
                     % (name, value, value))



def token_key(token: str) -> t.Tuple[int, str]:
    index, _, ident = token.partition(".")
    try:
        return int(index), ident
    except ValueError:
        raise BadRequest(400, "failed to read next_token %r" % token) from None


_FILTER_TOKEN = re.compile(r'\s*(?:(\()|(\))|(==|!=)|("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_.]*))')


def _member(value: str, field: t.Any) -> bool:
    """go-bexpr's ``value in field``: a map's keys, a list's elements, a string's substrings."""
    if isinstance(field, (dict, list, str)):
        return value in field
    return False


def parse_filter(text: str) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
    """A go-bexpr subset: ``Field == "v"``, ``!=``, ``and``, ``or``, ``not``, parentheses."""
    if not text.strip():
        return lambda item: True
    tokens: t.List[t.Tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _FILTER_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise BadRequest(400, "failed to read filter expression: unsupported syntax at %r" % text[pos:pos + 20])
        pos = m.end()
        lp, rp, op, string, ident = m.groups()
        if lp:
            tokens.append(("(", lp))
        elif rp:
            tokens.append((")", rp))
        elif op:
            tokens.append(("op", op))
        elif string:
            tokens.append(("str", json.loads(string)))
        elif ident in ("and", "or", "not", "in"):
            tokens.append((ident, ident))
        else:
            tokens.append(("id", ident))
    at = [0]

    def peek() -> t.Optional[str]:
        return tokens[at[0]][0] if at[0] < len(tokens) else None

    def take(kind: str) -> str:
        if peek() != kind:
            raise BadRequest(400, "failed to read filter expression %r: expected %s" % (text, kind))
        at[0] += 1
        return tokens[at[0] - 1][1]

    def primary() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        if peek() == "not":
            take("not")
            inner = primary()
            return lambda item: not inner(item)
        if peek() == "(":
            take("(")
            inner = disjunction()
            take(")")
            return inner
        if peek() == "str":  # "value" in Field / "value" not in Field
            member = take("str")
            negate = peek() == "not"
            if negate:
                take("not")
            take("in")
            where = take("id")
            return lambda item: _member(member, item.get(where)) != negate
        field = take("id")
        op = take("op")
        value = take("str")
        if op == "==":
            return lambda item: str(item.get(field)) == value
        return lambda item: str(item.get(field)) != value

    def chain(operand: t.Callable[[], t.Callable[[t.Mapping[str, t.Any]], bool]], word: str,
              combine: t.Callable[[t.Iterable[bool]], bool]) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        """``operand (word operand)*``, its results combined with ``combine`` (``all`` for and, ``any`` for or)."""
        parts = [operand()]
        while peek() == word:
            take(word)
            parts.append(operand())
        return lambda item: combine(p(item) for p in parts)

    def conjunction() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        return chain(primary, "and", all)

    def disjunction() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        return chain(conjunction, "or", any)

    result = disjunction()
    if at[0] != len(tokens):
        raise BadRequest(400, "failed to read filter expression %r: unexpected %r" % (text, tokens[at[0]][1]))
    return result
