# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An older commit of this repository, checked out beside it for a benchmark's ``--against REV``.

The older tree runs its own benchmark script in a subprocess, so the two are measured alternately in
the same run on the same machine; the worktree is removed afterwards, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from typing import Callable, Dict, Iterator, List, TypeVar

T = TypeVar("T")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def checked_out(rev: str) -> Iterator[str]:
    """The path of a temporary worktree at ``rev`` (beside the repository: local containers cannot see /tmp)."""
    work = tempfile.mkdtemp(prefix="bai-bench-rev-", dir=os.path.dirname(REPO))
    tree = os.path.join(work, "tree")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--quiet", tree, rev], check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], check=False)
        os.rmdir(work)


def alternately(rev: str, rounds: int, measure: Callable[[str], T]) -> Dict[str, List[T]]:
    """``measure(tree)`` of this tree, then of commit ``rev``, ``rounds`` times over:
    ``{"this": [...], rev: [...]}``, one result per round each."""
    runs: Dict[str, List[T]] = {"this": [], rev: []}
    with checked_out(rev) as tree:
        for _round in range(rounds):
            for label, where in (("this", REPO), (rev, tree)):
                runs[label].append(measure(where))
    return runs
