# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small check that an HCL file is laid out as ``nomad fmt`` leaves it, written from the rules of
hashicorp/hcl's ``hclwrite/format.go`` (what ``nomad fmt`` runs), independently of the renderer:

* lines are split like ``linesForFormat``: a heredoc (``<<EOT`` ... ``EOT``) is part of the line
  that opens it (its newlines are inside the template token);
* indentation (``formatIndent``): two spaces per open bracket level, counted per line;
* alignment (``formatCells``): a line whose first ``=`` has a right-hand side with balanced brackets
  has an "assign" cell; in a run of consecutive such lines every ``=`` stands one column after the
  longest lead (indentation included); any other line (blank, ``x {``, ``}``, ``x = {``) ends the run;
* spacing (``formatSpaces``): one space between tokens, none after ``[``/``(`` or before ``]``/``)``
  and ``,``, one after ``,``; braces have a space inside unless empty (``{}``); no trailing space;
* heredocs as Nomad's own jobspecs write them: ``<<EOT`` (not ``<<-``), closing delimiter alone at
  column 0, body untouched.

Plus the blank lines of Nomad's jobspecs, which ``nomad fmt`` keeps: one blank line between two
blocks and between a block's attributes and a nested block, none after ``{`` or before ``}``, never
two in a row, and the file ends in exactly one newline.
"""

from __future__ import annotations

import re
import typing as t

OPEN, CLOSE = "{[(", "}])"
HEREDOC_OPEN = re.compile(r"<<(-?)([A-Za-z_][A-Za-z0-9_]*)$")


class Line(t.NamedTuple):
    number: int  # 1-based line number of its first text line
    text: str  # the first text line (a heredoc's body and closing line are in ``body``)
    body: t.Tuple[str, ...]


def code_chars(text: str) -> t.Iterator[t.Tuple[int, str]]:
    """(index, char) of the characters outside quoted strings."""
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
            continue
        yield i, ch


def brackets(text: str) -> int:
    return sum((ch in OPEN) - (ch in CLOSE) for _, ch in code_chars(text))


def format_lines(source: str) -> t.List[Line]:
    raw = source.split("\n")
    out, i = [], 0
    while i < len(raw):
        text, body = raw[i], []
        start = i
        heredoc = HEREDOC_OPEN.search(text)
        i += 1
        if heredoc:
            while i < len(raw):
                body.append(raw[i])
                i += 1
                if raw[i - 1].strip() == heredoc.group(2):
                    break
        out.append(Line(start + 1, text, tuple(body)))
    return out


def assign_column(text: str) -> int:
    """Column of the ``=`` that starts an assign cell, or -1 (hclwrite: first '=' after the first token
    whose right-hand side has net zero brackets)."""
    for i, ch in code_chars(text):
        if ch == "=" and text[:i].strip():
            if text[i + 1:i + 2] == "=" or text[i - 1:i] in "!<>=":
                continue
            return i if brackets(text[i:]) == 0 else -1
    return -1


def problems(source: str) -> t.List[str]:
    """Every deviation from the layout, as ``line N: what``; empty when the file is formatted."""
    out: t.List[str] = []
    if not source.endswith("\n") or source.endswith("\n\n"):
        out.append("the file must end in exactly one newline")
    lines = format_lines(source[:-1] if source.endswith("\n") else source)
    indents: t.List[int] = []
    chain: t.List[t.Tuple[Line, int, int]] = []  # (line, lead width, '=' column)

    def close_chain() -> None:
        if chain:
            want = max(width for _, width, _ in chain) + 1
            for line, _, column in chain:
                if column != want:
                    out.append("line %d: '=' at column %d, aligned with its neighbours it is at %d"
                               % (line.number, column + 1, want + 1))
            del chain[:]

    previous: t.Optional[Line] = None
    for line in lines:
        text = line.text
        where = "line %d" % line.number
        if not text.strip():
            if text:
                out.append(where + ": a blank line holds spaces")
            if previous is None or not previous.text.strip():
                out.append(where + ": blank line at the start or a second blank line")
            elif previous.text.rstrip().endswith("{") and not previous.body:
                out.append(where + ": blank line right after '{'")
            close_chain()
            previous = line
            continue
        if previous is not None and not previous.text.strip() and text.strip() == "}":
            out.append(where + ": blank line right before '}'")
        if text != text.rstrip():
            out.append(where + ": trailing whitespace")
        # indentation (formatIndent)
        net = brackets(text)
        if net < 0:
            closed = -net
            while closed > 0 and indents:
                if closed >= indents[-1]:
                    closed -= indents.pop()
                else:
                    indents[-1] -= closed
                    closed = 0
        want = 2 * len(indents)
        have = len(text) - len(text.lstrip(" "))
        if have != want:
            out.append("%s: indented %d spaces, %d expected" % (where, have, want))
        if net > 0:
            indents.append(net)
        # spacing (formatSpaces)
        column = assign_column(text)
        lead = text[:column].rstrip() if column >= 0 else text
        rest = text[column:] if column >= 0 else ""
        for part in (lead.lstrip(" "), rest):
            code = re.sub(r'"(?:[^"\\]|\\.)*"', '"s"', part)  # each string as one token
            if "  " in code:
                out.append(where + ": two spaces between tokens")
            if re.search(r"[\[(] | [\]),]|,\S|\{\S|\S\}", code.replace("{}", "")):
                out.append(where + ": spacing around brackets or commas is not hclwrite's")
        if column >= 0:
            if not rest.startswith("= ") or rest.startswith("=  "):
                out.append(where + ": one space after '='")
            chain.append((line, len(lead), column))
        else:
            close_chain()
        # heredocs as Nomad writes them
        heredoc = HEREDOC_OPEN.search(text)
        if heredoc:
            if heredoc.group(1):
                out.append(where + ": indented heredoc (<<-); Nomad's jobspecs use <<EOT")
            if not line.body or line.body[-1] != heredoc.group(2):
                out.append(where + ": heredoc's closing delimiter is not alone at column 0")
        # blank lines between blocks (Nomad's jobspecs)
        stripped = text.strip()
        opens_block = stripped.endswith("{") and stripped != "{"
        if previous is not None and previous.text.strip():
            before = previous.text.strip()
            if opens_block and not before.endswith("{"):
                out.append(where + ": a block needs a blank line before it (after %r)" % before)
            elif before == "}" and stripped != "}":
                out.append(where + ": a blank line is needed after a block")
        previous = line
    close_chain()
    if indents:
        out.append("end of file: %d bracket level(s) left open" % len(indents))
    return out
