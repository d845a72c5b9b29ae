# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State directory of a local cluster session: layout, journal, locks, subnet registry.

Every side effect the local runtime makes outside its state directory is first
recorded in ``<state_root>/<name>/journal`` (one JSON object per line, fsync'ed),
so that ``destroy_session`` can undo a session whose creator was killed at any point.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._files import fsync_dir

SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Set (to the session's state dir) in the environment of every process started for a
# session, so destroy finds them all, even those of a creator that was killed.
OWNER_ENV = "BACKENDAI_CLUSTER_LOCAL_OWNER"


def owner_env(owner: str) -> t.Dict[str, str]:
    """A minimal environment for the runtime's subprocesses, tagged with their session."""
    return {"PATH": SANE_PATH, OWNER_ENV: owner}


class LocalRuntimeError(BackendAIClusterError):
    """Any failure of the local runtime; the message says what went wrong and what is needed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SessionPaths:
    """Layout of ``<state_root>/<name>/``."""

    state_root: str
    name: str

    @property
    def root(self) -> str:
        return os.path.join(self.state_root, self.name)

    def _p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def journal(self) -> str:
        return self._p("journal")

    @property
    def session_json(self) -> str:
        return self._p("session.json")

    @property
    def user_ssh_config(self) -> str:
        return self._p("ssh_config")

    @property
    def ssh_dir(self) -> str:
        return self._p("ssh")

    @property
    def private_key(self) -> str:
        return self._p("ssh", "id_cluster")

    @property
    def cni_dir(self) -> str:
        return self._p("cni")

    @property
    def logs_dir(self) -> str:
        return self._p("logs")

    def container_dir(self, host: str) -> str:
        return self._p("containers", host)

    def log(self, host: str) -> str:
        return self._p("logs", host + ".log")

    def system_log(self, host: str) -> str:
        return self._p("logs", host + ".system.log")

    def exitcode(self, host: str) -> str:
        return self._p("logs", host + ".exitcode")

    def cni_cache(self, host: str) -> str:
        return self._p("cni", host + ".json")


def read_text(path: str) -> t.Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_json(path: str) -> t.Any:
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def tail_lines(path: str, count: int, max_bytes: int = 1 << 20) -> t.List[str]:
    """Last ``count`` lines of a (possibly large) text file; [] if it does not exist."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-count:]


class Journal:
    """Append-only, fsync'ed record of side effects, written BEFORE each side effect."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        existed = os.path.exists(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not existed:
            fsync_dir(os.path.dirname(path))

    def record(self, op: str, **data: t.Any) -> None:
        line = json.dumps(dict(data, op=op), sort_keys=True) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @staticmethod
    def replay(path: str) -> t.List[t.Dict[str, t.Any]]:
        """All complete records; a torn last line (crash while appending) is ignored."""
        text = read_text(path) or ""
        entries: t.List[t.Dict[str, t.Any]] = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "op" in entry:
                entries.append(entry)
        return entries


@contextlib.contextmanager
def flocked(path: str, exclusive: bool = True, blocking: bool = True) -> t.Iterator[t.Optional[int]]:
    """flock() a file or directory; yields the fd, or None if non-blocking and busy."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        flags = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, flags)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def session_names(state_root: str) -> t.List[str]:
    try:
        entries = sorted(os.listdir(state_root))
    except FileNotFoundError:
        return []
    return [e for e in entries
            if not e.startswith(".") and os.path.isdir(os.path.join(state_root, e))]
