# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one file writer: atomic replacement (:func:`write_file`), a new file in a new directory
(:func:`create_file`), and writing a text file only when its content differs (:func:`ensure_file`), what makes file writes idempotent and check-mode safe
(rendered jobs, CNI network configs, the local runtime's state). A leaf: stdlib only.

The CNI plugin (``_network/_cni_plugin.py``) keeps a writer of its own: it runs on agents as a
standalone program without this package."""

from __future__ import annotations

import os
import threading
import typing as t


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_new(path: str, raw: bytes, mode: int, owner: t.Optional[t.Tuple[int, int]] = None,
               durable: bool = False) -> None:
    """Make ``path``, which must not exist (FileExistsError), with ``mode`` and ``owner`` set before anything is
    written; on any failure it is removed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # umask may have narrowed it
        if owner is not None:
            os.fchown(fd, owner[0], owner[1])
        write_all(fd, raw)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def write_file(path: str, data: t.Union[str, bytes], mode: int = 0o644, durable: bool = False) -> None:
    """Atomically replace ``path``; the file never exists with wider permissions than ``mode``."""
    tmp = "%s.tmp.%d.%d" % (path, os.getpid(), threading.get_ident())
    _write_new(tmp, data.encode() if isinstance(data, str) else data, mode, durable=durable)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def create_file(path: str, data: t.Union[str, bytes], mode: int = 0o644, owner: t.Optional[t.Tuple[int, int]] = None) -> None:
    """Make ``path``, a file that must not exist yet (FileExistsError), with ``mode`` and ``owner`` (uid, gid)
    set before anything is written: for a directory just made, where nobody reads a file before it is
    complete, without :func:`write_file`'s temporary file and rename (the local runtime makes several per
    container)."""
    _write_new(path, data.encode() if isinstance(data, str) else data, mode, owner)


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
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    write_file(path, text, mode=mode)
    return True
