# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering a Nomad job (the JSON of Nomad's HTTP API) as an HCL2 jobspec for ``nomad job run``.

``render_hcl(job)`` takes the bare job that :func:`_nomad.job.render_job` returns (API names:
``ID``, ``TaskGroups``, ``LTarget`` ...) and writes the same job in Nomad's jobspec names
(``job "<ID>"``, ``group``, ``attribute`` ...). The translation is table-driven: one table per API
struct maps each API key to its HCL name and the kind of value (see :data:`_nomad.jobspec.STRUCTS`). A key that
is not in the table raises :class:`ValueError` instead of being dropped, so a new field in
``render_job`` cannot silently vanish from the HCL.

Strings are escaped for HCL2 templates: ``${`` is written ``$${`` and ``%{`` is written ``%%{``
(in quoted strings and heredocs alike), so Nomad receives the literal text and its own runtime
interpolation (``${NOMAD_META_X}``, ``${node.unique.name}``) still applies. Quoted strings also
escape ``"``, ``\\`` and control characters; a multi-line string that ends in a newline is written
as a heredoc (``<<EOT``, with a delimiter that occurs nowhere in the text; backslashes are literal
in heredocs). Durations (integer nanoseconds in JSON) are written as Go duration strings (``"5m"``).

Two places where HCL cannot spell the JSON one-to-one, both equivalent for Nomad:

* ``Meta`` and ``Env`` keys that are not plain identifiers (``a.b``, ``x-y``) use map assignment
  (``meta = { "a.b" = "x" }``), which Nomad's jobspec2 accepts for ``meta`` and ``env``;
* driver ``Config`` is free-form: lists of maps become repeated blocks (``x { ... }``), which Nomad
  stores as ``Config.x``;
* the group's ``Volumes`` (a map of label -> volume in JSON) are ``volume "<label>" { ... }`` blocks.

Pure, deterministic (struct fields in table order, maps in their given order), stdlib only.
"""

from __future__ import annotations

import copy
import math
import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.jobspec import (
    ATTR,
    BLOCK,
    BLOCK_MAP,
    BLOCKS,
    CONFIG,
    CONFIG_BLOCK_NAMES,
    DURATION,
    LABEL,
    LIST,
    MAP,
    MAP_ATTR,
    STRUCTS,
    Field,
)

INDENT = "  "
# Identifiers written bare (block attribute names). Narrower than HCL's identifier syntax on
# purpose: no '-' and no keywords, so every consumer reads them the same way.
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYWORDS = frozenset(("true", "false", "null", "for", "in", "if", "else", "endif", "endfor"))
_GO_UNITS = (("h", 3600 * 10 ** 9), ("m", 60 * 10 ** 9), ("s", 10 ** 9))
_HEREDOC_SAFE = re.compile(r"^[^\x00-\x08\x0b-\x1f\x7f]*$")  # no control characters but \t and \n
_QUOTE_ESCAPES = {c: "\\u%04x" % c for c in list(range(0x20)) + [0x7F]}
_QUOTE_ESCAPES.update({ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_HEREDOC_OPEN = re.compile(r" = <<([A-Za-z0-9_]+)$")
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f\x7f"\\]')  # most strings have none: they are written as they are


# --- values --------------------------------------------------------------------------------------

def is_plain_name(key: str) -> bool:
    """Whether ``key`` can be written bare as an attribute name inside a block."""
    return bool(_PLAIN_NAME.match(key)) and key not in _KEYWORDS


def _escape_template(text: str) -> str:
    """Escape HCL2 template introducers: ``${`` -> ``$${`` and ``%{`` -> ``%%{``.

    A ``$`` or ``%`` not followed by ``{`` is literal in HCL, so a literal ``$${`` becomes
    ``$$${``, which HCL reads as ``$`` followed by the escape ``$${``, i.e. ``$${`` again.
    """
    return text.replace("${", "$${").replace("%{", "%%{")


def quote(text: str) -> str:
    """An HCL2 quoted string whose value is exactly ``text``."""
    if _NEEDS_ESCAPE.search(text):
        text = text.translate(_QUOTE_ESCAPES)
    return '"%s"' % _escape_template(text)


def heredoc_delimiter(text: str) -> str:
    """``EOT``, or ``EOT1``, ``EOT2`` ...: the first that occurs nowhere in ``text``."""
    delimiter, n = "EOT", 0
    while delimiter in text:
        n += 1
        delimiter = "EOT%d" % n
    return delimiter


def _wants_heredoc(text: str) -> bool:
    # A heredoc's value always ends in a newline, and its lines cannot carry \r or other
    # control characters unambiguously: anything else is a quoted string with escapes.
    return "\n" in text and text.endswith("\n") and bool(_HEREDOC_SAFE.match(text))


def string(text: str) -> str:
    """A string expression: a heredoc for multi-line text ending in a newline, else quoted.

    The heredoc's closing delimiter sits at column 0 and is followed by a newline, which the
    caller's line break provides.
    """
    if _wants_heredoc(text):
        delimiter = heredoc_delimiter(text)
        return "<<%s\n%s%s" % (delimiter, _escape_template(text), delimiter)
    return quote(text)


def label(text: t.Any, where: str) -> str:
    """A block label: a quoted string literal (HCL allows no template sequences in labels)."""
    if not isinstance(text, str) or not text:
        raise ValueError("%s: a block label must be a non-empty string, got %r" % (where, text))
    if "${" in text or "%{" in text or not _HEREDOC_SAFE.match(text) or "\n" in text:
        raise ValueError("%s: %r cannot be an HCL block label (template sequence or control "
                         "character)" % (where, text))
    return quote(text)


def scalar(value: t.Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("%s: %r is not a finite number" % (where, value))
        return repr(value)
    if isinstance(value, str):
        return string(value)
    raise ValueError("%s: expected a string, number or bool, got %s %r" % (where, type(value).__name__, value))


def expression(value: t.Any, where: str) -> str:
    """Any JSON value as a one-line HCL expression (lists and objects included; no heredocs)."""
    if isinstance(value, list):
        return "[%s]" % ", ".join(expression(v, "%s[%d]" % (where, i)) for i, v in enumerate(value))
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError("%s: map key %r is not a string" % (where, k))
            items.append("%s = %s" % (quote(k), expression(v, "%s.%s" % (where, k))))
        return "{ %s }" % ", ".join(items) if items else "{}"
    if isinstance(value, str):
        return quote(value)
    return scalar(value, where)


def go_duration(ns: t.Any, where: str) -> str:
    """Integer nanoseconds as an exact Go duration string: 300s -> "5m", 90s -> "1m30s"."""
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise ValueError("%s: a duration must be integer nanoseconds, got %r" % (where, ns))
    if ns == 0:
        return '"0s"'
    sign, rest = ("-", -ns) if ns < 0 else ("", ns)
    parts = []
    for unit, size in _GO_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append("%d%s" % (count, unit))
    if rest:
        for unit, size in (("ms", 10 ** 6), ("us", 10 ** 3), ("ns", 1)):
            if rest % size == 0:
                parts.append("%d%s" % (rest // size, unit))
                break
    return '"%s%s"' % (sign, "".join(parts))


# --- blocks --------------------------------------------------------------------------------------

def _attribute(lines: t.List[str], depth: int, name: str, value: str) -> None:
    lines.append("%s%s = %s" % (INDENT * depth, name, value))


def _map(lines: t.List[str], depth: int, name: str, value: t.Any, where: str, attribute: bool = False) -> None:
    if not isinstance(value, dict):
        raise ValueError("%s: expected a map of strings, got %r" % (where, value))
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError("%s: expected a map of strings, got %r = %r" % (where, k, v))
    pad = INDENT * depth
    if not attribute and all(is_plain_name(k) for k in value):
        lines.append("%s%s {" % (pad, name))
        for k, v in value.items():
            _attribute(lines, depth + 1, k, string(v))
    else:
        # Map assignment: keys like "a.b" are not valid attribute names in a block.
        lines.append("%s%s = {" % (pad, name))
        for k, v in value.items():
            _attribute(lines, depth + 1, quote(k), string(v))
    lines.append(pad + "}")


def _config_body(lines: t.List[str], depth: int, config: t.Mapping[str, t.Any], where: str) -> None:
    """Free-form driver config: maps and lists of maps as blocks, everything else as attributes."""
    for key, value in config.items():
        at = "%s.%s" % (where, key)
        if not isinstance(key, str) or not is_plain_name(key):
            raise ValueError("%s: driver config key %r is not a valid HCL attribute name" % (where, key))
        if value is None:
            raise ValueError("%s: null is not a valid driver config value" % at)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            name = CONFIG_BLOCK_NAMES.get(key, key)
            for i, item in enumerate(value):
                _config_block(lines, depth, name, item, "%s[%d]" % (at, i))
        elif isinstance(value, dict):
            _config_block(lines, depth, key, value, at)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
            raise ValueError("%s: a list that mixes maps and other values has no HCL block form" % at)
        elif isinstance(value, list):
            _attribute(lines, depth, key, expression(value, at))
        else:
            _attribute(lines, depth, key, scalar(value, at))


def _config_block(lines: t.List[str], depth: int, name: str, value: t.Mapping[str, t.Any], where: str) -> None:
    pad = INDENT * depth
    if all(isinstance(k, str) and is_plain_name(k) for k in value):
        lines.append("%s%s {" % (pad, name))
        _config_body(lines, depth + 1, value, where)
        lines.append(pad + "}")
    else:
        _attribute(lines, depth, name, expression(value, where))


def _check_keys(table: t.Mapping[str, Field], struct: str, value: t.Mapping[str, t.Any], where: str) -> None:
    unknown = [k for k in value if k not in table]
    if unknown:
        raise ValueError("%s: unknown %s key(s) %s; the HCL renderer knows: %s" % (
            where, struct, ", ".join(repr(k) for k in unknown), ", ".join(table)))


def _struct(lines: t.List[str], depth: int, struct: str, value: t.Any, where: str) -> None:
    """One struct as a block (with its label, when the struct has one)."""
    table = STRUCTS[struct]
    if not isinstance(value, dict):
        raise ValueError("%s: expected a %s object, got %r" % (where, struct, value))
    _check_keys(table, struct, value, where)
    header = ""
    for key, field in table.items():
        if field.kind == LABEL:
            if key not in value:
                raise ValueError("%s: %s.%s is required (it is the block label)" % (where, struct, key))
            header = "%s %s {" % (field.hcl, label(value[key], "%s.%s" % (where, key)))
    if not header:
        raise ValueError("internal: struct %s has no label; render it with _body" % struct)
    pad = INDENT * depth
    lines.append(pad + header)
    _body(lines, depth + 1, struct, value, where)
    lines.append(pad + "}")


def _body(lines: t.List[str], depth: int, struct: str, value: t.Mapping[str, t.Any], where: str) -> None:
    table = STRUCTS[struct]
    _check_keys(table, struct, value, where)
    for key, field in table.items():
        if key not in value or value[key] is None or field.kind == LABEL:
            continue
        item = value[key]
        at = "%s.%s" % (where, key)
        if field.omit_if_equal and item == value.get(field.omit_if_equal):
            continue
        if field.kind == ATTR:
            _attribute(lines, depth, field.hcl, scalar(item, at))
        elif field.kind == LIST:
            if not isinstance(item, list) or any(isinstance(v, (list, dict)) for v in item):
                raise ValueError("%s: expected a list of scalars, got %r" % (at, item))
            _attribute(lines, depth, field.hcl, expression(item, at))
        elif field.kind == DURATION:
            _attribute(lines, depth, field.hcl, go_duration(item, at))
        elif field.kind == MAP:
            _map(lines, depth, field.hcl, item, at)
        elif field.kind == MAP_ATTR:
            _map(lines, depth, field.hcl, item, at, attribute=True)
        elif field.kind == BLOCK:
            if not isinstance(item, dict):
                raise ValueError("%s: expected a %s object, got %r" % (at, field.struct, item))
            _plain_block(lines, depth, field, item, at)
        elif field.kind == BLOCKS:
            if not isinstance(item, list):
                raise ValueError("%s: expected a list of %s objects, got %r" % (at, field.struct, item))
            labelled = any(f.kind == LABEL for f in STRUCTS[field.struct].values())
            for i, element in enumerate(item):
                element_at = "%s[%d]" % (at, i)
                if labelled:
                    _struct(lines, depth, field.struct, element, element_at)
                else:
                    if not isinstance(element, dict):
                        raise ValueError("%s: expected a %s object, got %r" % (element_at, field.struct, element))
                    _plain_block(lines, depth, field, element, element_at)
        elif field.kind == BLOCK_MAP:
            if not isinstance(item, dict):
                raise ValueError("%s: expected a map of %s objects, got %r" % (at, field.struct, item))
            key = next(k for k, f in STRUCTS[field.struct].items() if f.kind == LABEL)
            for name, element in item.items():
                element_at = "%s[%s]" % (at, quote(str(name)))
                if not isinstance(element, dict) or element.get(key) != name:
                    raise ValueError("%s: expected a %s object whose %s is its key %r, got %r"
                                     % (element_at, field.struct, key, name, element))
                _struct(lines, depth, field.struct, element, element_at)
        elif field.kind == CONFIG:
            if not isinstance(item, dict):
                raise ValueError("%s: expected a map, got %r" % (at, item))
            pad = INDENT * depth
            lines.append("%s%s {" % (pad, field.hcl))
            _config_body(lines, depth + 1, item, at)
            lines.append(pad + "}")
        else:  # pragma: no cover - the tables only use the kinds above
            raise ValueError("internal: unknown kind %r for %s" % (field.kind, at))


def _plain_block(lines: t.List[str], depth: int, field: Field, value: t.Mapping[str, t.Any], where: str) -> None:
    pad = INDENT * depth
    lines.append("%s%s {" % (pad, field.hcl))
    _body(lines, depth + 1, field.struct, value, where)
    lines.append(pad + "}")


# --- nomad fmt layout ----------------------------------------------------------------------------

def _heredoc_end(line: str) -> str:
    """The closing delimiter when ``line`` is an attribute whose value opens a heredoc, else ''."""
    match = _HEREDOC_OPEN.search(line) if "<<" in line else None
    return match.group(1) if match else ""


def nomad_fmt(lines: t.Sequence[str]) -> t.List[str]:
    """Lay out the renderer's lines as ``nomad fmt`` (hclwrite) leaves them, plus Nomad's blank lines.

    hclwrite aligns the ``=`` of consecutive one-line attributes (a heredoc counts as one line; a
    line that opens a block or a multi-line map ends the run) one space after the longest name.
    The blank lines follow Nomad's own jobspecs (``nomad job init``): one between two blocks and
    between a block's attributes and its nested blocks, none after ``{`` or before ``}``;
    ``nomad fmt`` keeps them. Heredoc bodies and their closing delimiter stay as they are.
    """
    out: t.List[str] = []
    run: t.List[t.Tuple[str, str, t.List[str]]] = []  # (indent+name, value, heredoc lines)
    last: t.Dict[int, str] = {}  # depth -> "attr" / "block" of the previous item in that body

    def flush() -> None:
        width = max((len(item[0]) for item in run), default=0)
        for lead, value, tail in run:
            out.append("%s = %s" % (lead.ljust(width), value))
            out.extend(tail)
        del run[:]

    def item(depth: int, kind: str) -> None:
        previous = last.get(depth)
        if previous and (previous == "block" or kind == "block"):
            flush()
            out.append("")
        last[depth] = kind

    i = 0
    while i < len(lines):
        line = lines[i]
        depth = (len(line) - len(line.lstrip(" "))) // len(INDENT)
        stripped = line.strip()
        i += 1
        if stripped == "}":
            flush()
            last.pop(depth + 1, None)
            out.append(line)
        elif stripped.endswith("{"):
            item(depth, "block")
            flush()
            out.append(line)
        else:
            item(depth, "attr")
            lead, value = line.split(" = ", 1)
            tail: t.List[str] = []
            end = _heredoc_end(line)
            while end:
                tail.append(lines[i])
                i += 1
                if tail[-1] == end:
                    break
            run.append((lead, value, tail))
    flush()
    return out


def render_hcl(job: t.Mapping[str, t.Any]) -> str:
    """The HCL2 jobspec of ``job`` (a bare job in Nomad API JSON, as ``render_job`` returns).

    Raises :class:`ValueError` for a key the tables do not know, a value of the wrong type, or a
    label HCL cannot carry.
    """
    if not isinstance(job, dict):
        raise ValueError("job: expected a Nomad job object, got %r" % (job,))
    if set(job) == {"Job"}:
        raise ValueError("job: this is a register request; pass its 'Job' value to render_hcl")
    groups = job.get("TaskGroups")
    if not (isinstance(groups, list) and len(groups) > 1 and all(isinstance(g, dict) for g in groups)
            and list(STRUCTS["Job"])[-1] == "TaskGroups"):
        lines: t.List[str] = []
        _struct(lines, 0, "Job", job, "job")
        return "\n".join(nomad_fmt(lines)) + "\n"
    # The groups apart (the last blocks of the job: each after a blank line, its layout its own), each group like
    # an earlier one made from that one's text (see _GroupTexts)
    lines = []
    _struct(lines, 0, "Job", dict(job, TaskGroups=[]), "job")
    head = nomad_fmt(lines)
    texts = _GroupTexts()
    body = "".join("\n\n" + texts.text(g, "job.TaskGroups[%d]" % i) for i, g in enumerate(groups))
    return "\n".join(head[:-1]) + body + "\n" + head[-1] + "\n"


# --- groups that differ in a few strings ----------------------------------------------------------

_MARK = re.compile("\ue000([0-9]+)\ue001")
_MARKS = re.compile("[\n\ue000\ue001]")  # a newline may make a heredoc
#: What a block label may not hold (:func:`label` refuses it): such a string in a label's place is rendered whole.
_NOT_A_LABEL = re.compile("[\x00-\x1f\x7f]|[$%]\\{")
_LABEL_KEYS = frozenset(k for table in STRUCTS.values() for k, f in table.items() if f.kind == LABEL)
#: How many groups of other shapes are kept to compare with (a job of groups that share no shape is rendered whole).
_MAX_REFS = 8


class _GroupTexts:
    """The jobspec text of task groups (at depth 1, laid out), each rendered once per *shape*.

    A session's groups differ from each other in a few strings (name, agent, hostname, MAC, a few env values):
    a group whose structure and non-string values equal an earlier group's (a *reference*) is that reference's text
    with the differing strings put in. The text is made once per reference and set of differing places, with a
    mark (private-use characters) at each, rendered by the same code as any group; a group's strings go in quoted
    as :func:`quote` quotes them. A string that could render otherwise (multi-line: a heredoc; a template sequence
    or control character: escaped, or refused in a label) or a mark character is never put in: its group is
    rendered whole and becomes a reference itself (up to :data:`_MAX_REFS`), so every check and error is the
    renderer's own.
    (Equality of non-string values is Python's: a group whose ``1`` is another's ``True`` would take its text.)"""

    def __init__(self) -> None:
        self.refs: t.List[t.Mapping[str, t.Any]] = []
        self.shapes: t.Dict[t.Tuple[int, t.Tuple[t.Tuple[t.Any, ...], ...]], t.List[str]] = {}

    def text(self, group: t.Mapping[str, t.Any], where: str) -> str:
        for i, ref in enumerate(self.refs):
            places: t.List[t.Tuple[t.Tuple[t.Any, ...], str]] = []
            if _differing(group, ref, (), places):
                if i:  # the reference of the last group first: groups of one shape come in runs
                    self.refs.insert(0, self.refs.pop(i))
                break
        else:
            lines: t.List[str] = []
            _struct(lines, 1, "TaskGroup", group, where)
            if len(self.refs) < _MAX_REFS:
                self.refs.append(group)
            return "\n".join(nomad_fmt(lines))
        key = (id(ref), tuple(path for path, _value in places))  # (the references are kept: their ids stay theirs)
        parts = self.shapes.get(key)
        if parts is None:
            masked = _masked(ref, [path for path, _value in places])
            lines = []
            _struct(lines, 1, "TaskGroup", masked, where)
            parts = self.shapes[key] = _MARK.split("\n".join(nomad_fmt(lines)))
        values = [quote(value)[1:-1] for _path, value in places]
        return "".join(part if j % 2 == 0 else values[int(part)] for j, part in enumerate(parts))


def _differing(a: t.Any, b: t.Any, path: t.Tuple[t.Any, ...], out: t.List[t.Tuple[t.Tuple[t.Any, ...], str]]) -> bool:
    """Whether ``a`` has ``b``'s structure and non-string values; the places where their strings differ, with
    ``a``'s, appended to ``out`` (False also when a differing string cannot be put into a text, see _GroupTexts)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if list(a) != list(b):
            return False
        pairs: t.Iterable[t.Tuple[t.Any, t.Any, t.Any]] = ((k, v, b[k]) for k, v in a.items())
    elif isinstance(a, list):
        if len(a) != len(b):
            return False
        pairs = ((i, v, w) for i, (v, w) in enumerate(zip(a, b)))
    else:
        return False
    for k, v, w in pairs:
        if v is w or (type(v) is type(w) and v == w):
            continue
        if isinstance(v, str) and isinstance(w, str):  # a differing string: put in, if it can be (see _GroupTexts)
            if _MARKS.search(v) or (k in _LABEL_KEYS and _NOT_A_LABEL.search(v)):
                return False
            out.append((path + (k,), v))
        elif not _differing(v, w, path + (k,), out):
            return False
    return True


def _masked(group: t.Mapping[str, t.Any], paths: t.Sequence[t.Tuple[t.Any, ...]]) -> t.Dict[str, t.Any]:
    """A copy of ``group`` with the mark of place ``i`` at ``paths[i]``."""
    out = copy.deepcopy(group)
    for i, path in enumerate(paths):
        node = out
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = "\ue000%d\ue001" % i
    return out
