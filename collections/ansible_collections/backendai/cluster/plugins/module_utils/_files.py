# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing a text file only when its content differs, atomically: what makes file writes idempotent
and check-mode safe across the collection (rendered jobs, CNI network configs)."""

from __future__ import annotations

import os
import tempfile


def ensure_file(path: str, text: str, check_mode: bool = False, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` unless it is there already; True if it changed (or would, in check mode).

    The parent directory is created when missing; the file is replaced atomically (temporary file in
    the same directory, then rename), so readers never see half a file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".backendai-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True
