# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The README is the front door: at most 16 KB (design notes live in docs/), and every relative link in it and in
docs/ leads somewhere: the file exists in the repository and, for a ``#fragment`` into a Markdown file, that file
has a heading with that anchor (GitHub's rule: lower case, punctuation dropped, spaces to hyphens). Links to the
Backend.AI documentation replace paths a clone does not have (``../shared``)."""

from __future__ import annotations

import glob
import os
import re
import typing as t

import pytest

from repo_helpers import REPO

README = os.path.join(REPO, "README.md")
README_MAX_BYTES = 16 * 1024
DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
PAGES = [README] + DOCS

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and [text](target "title"); images too. Not inside inline code (stripped first).
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")


def _prose_lines(path: str) -> t.Iterator[t.Tuple[int, str]]:
    """Lines outside fenced code blocks and indented code (four spaces after a blank line)."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line.lstrip()):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line.rstrip("\n")


def anchors(path: str) -> t.Set[str]:
    """The anchors GitHub makes for a Markdown file's headings (a repeated one gets -1, -2, ...)."""
    seen: t.Dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path):
        m = HEADING.match(line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else "%s-%d" % (slug, n))
    return found


def links(path: str) -> t.Iterator[t.Tuple[int, str]]:
    for number, line in _prose_lines(path):
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, m.group(1)


def broken_links(path: str) -> t.List[str]:
    bad = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not checked here (no network)
            continue
        where = "%s:%d: %s" % (os.path.relpath(path, REPO), number, target)
        file_part, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not dest.startswith(REPO + os.sep) and dest != REPO:
            bad.append(where + " (outside the repository: a clone does not have it)")
        elif not os.path.exists(dest):
            bad.append(where + " (no such file)")
        elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
            bad.append(where + " (no heading with this anchor in %s)" % os.path.relpath(dest, REPO))
    return bad


def test_the_readme_is_at_most_16_kb() -> None:
    size = os.path.getsize(README)
    assert size <= README_MAX_BYTES, "README.md is %d bytes (at most %d): design notes go to docs/" % (
        size, README_MAX_BYTES)


def test_there_are_docs_pages() -> None:
    names = {os.path.basename(p) for p in DOCS}
    assert {"architecture.md", "benchmarks.md", "testing.md"} <= names, names


@pytest.mark.parametrize("path", PAGES, ids=[os.path.relpath(p, REPO) for p in PAGES])
def test_every_relative_link_resolves(path: str) -> None:
    assert not broken_links(path)


@pytest.mark.parametrize("path", PAGES, ids=[os.path.relpath(p, REPO) for p in PAGES])
def test_no_path_a_clone_does_not_have(path: str) -> None:
    """Backend.AI's documentation is linked, not ``../shared/seeds`` (the team's folder beside the checkout)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert "shared/seeds" not in text


def test_the_link_check_catches_a_broken_link(tmp_path: t.Any) -> None:
    """The check itself: a missing file, a missing anchor and a path out of the repository are reported; a good
    link and its anchor are not."""
    page = os.path.join(REPO, "docs", "architecture.md")
    assert "the-layers-and-the-import-rule" in anchors(page)
    fake = os.path.join(REPO, "docs", ".link-check-%d.md" % os.getpid())
    try:
        with open(fake, "w", encoding="utf-8") as f:
            f.write("# A page\n\n[ok](architecture.md#the-layers-and-the-import-rule) [self](#a-page)\n"
                    "[gone](no-such-page.md) [anchor](architecture.md#no-such-heading) [out](../../elsewhere.md)\n"
                    "`[code](not-a-link.md)`\n\n```\n[fenced](not-a-link-either.md)\n```\n")
        bad = broken_links(fake)
    finally:
        os.unlink(fake)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "no-such-page.md (no such file)",
        "architecture.md#no-such-heading (no heading with this anchor in docs/architecture.md)",
        "../../elsewhere.md (outside the repository: a clone does not have it)"], bad
