# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's side of the exec channel (``_session.exec_channel``): a command in many containers from one process.

:func:`volume_args` gives a container its exec directory (``<container dir>/exec``, 0700 root, bound at
``_session.exec_channel.MOUNT``) with the agent's script; :func:`start` sends one process spec (what
``_local.runc_exec.plan`` makes for ``runc exec``) to a container's agent, and :func:`wait_all` waits for many at
once in one ``poll`` loop (where 64 ``runc exec`` are 64 Go processes, each compiling a seccomp profile).

The directory is written by the container's root too, so the host treats what is in it as hostile: it opens the
directory once (``O_NOFOLLOW``) and everything in it relative to that descriptor, never following a link
(``O_NOFOLLOW``, ``O_EXCL`` for what it creates, ``unlink`` for what it removes), only ever writes to the agent's FIFO
after checking it is a FIFO, and reads nothing but the FIFOs it made itself. A container whose agent is not
there (a session made before the channel, an image where the bundle does not match, the agent not started yet)
answers ``None``: the caller uses ``runc exec``.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import stat
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.exec_channel import (
    AGENT_FILE, AGENT_SCRIPT, MOUNT, REQUEST_FIFO, request_text)

DIR_NAME = "exec"
#: How long the host waits for a killed command's FIFOs to close before it gives up on it (s).
KILL_GRACE = 2.0
#: How long the host waits for the agent to take a command (its ``<id>.pid``) before it reports the container
#: unreachable (the agent was stopped, or the container is going away): without it a command nobody took would be
#: waited for forever when there is no ``command_timeout``.
TAKE_TIMEOUT = 5.0
_SUFFIXES = (".out", ".err", ".rc")


def volume_args(container_dir: str) -> t.List[str]:
    """``podman run`` arguments binding the container's exec directory (made here, 0700 root, with the agent)."""
    path = os.path.join(container_dir, DIR_NAME)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    fd = os.open(os.path.join(path, AGENT_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(AGENT_SCRIPT)
    return ["--volume", "%s:%s" % (path, MOUNT)]


class _Job:
    """One container's command through its agent: the FIFOs the host reads and what came out of them."""

    def __init__(self, dir_fd: int, ident: str) -> None:
        self.dir_fd, self.ident = dir_fd, ident
        self.fds: t.Dict[int, str] = {}
        self.data = {s: bytearray() for s in _SUFFIXES}
        self.start = time.monotonic()
        self.end: t.Optional[float] = None

    def close(self) -> None:
        for fd in list(self.fds):
            os.close(fd)
        self.fds.clear()
        for name in [self.ident + s for s in _SUFFIXES + (".req", ".pid")]:
            try:
                os.unlink(name, dir_fd=self.dir_fd)
            except OSError:
                pass
        os.close(self.dir_fd)


def _open_request(dir_fd: int) -> int:
    """The agent's request FIFO, opened for writing (``OSError``: none, not a FIFO, or one nobody reads)."""
    fd = os.open(REQUEST_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a FIFO")
    return fd


def start(exec_dir: str, process: t.Mapping[str, t.Any]) -> t.Optional[_Job]:
    """``process`` (a runc process spec) sent to the agent of the container whose exec directory is ``exec_dir``;
    ``None`` when that container has no agent (use runc exec)."""
    if not process.get("args"):
        return None
    try:
        dir_fd = os.open(exec_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    job = _Job(dir_fd, secrets.token_hex(8))
    try:
        request = _open_request(dir_fd)
    except OSError:  # ENXIO: a FIFO nobody reads (no agent); ENOENT, ELOOP, EINVAL: none, or not one the agent made
        job.close()
        return None
    try:
        for suffix in _SUFFIXES:
            os.mkfifo(job.ident + suffix, 0o600, dir_fd=dir_fd)
            fd = os.open(job.ident + suffix, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
            job.fds[fd] = suffix
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a FIFO")
        text = request_text(process)
        fd = os.open(job.ident + ".req", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        job.start = time.monotonic()
        os.write(request, ("run %s\n" % job.ident).encode())
    except (OSError, KeyError, TypeError, ValueError):
        job.close()
        return None
    finally:
        os.close(request)
    return job


def _send(job: _Job, line: str) -> None:
    try:
        request = _open_request(job.dir_fd)
    except OSError:
        return
    try:
        os.write(request, line.encode())
    except OSError:
        pass
    finally:
        os.close(request)


def wait_all(jobs: t.Sequence[_Job], timeout: float) -> t.List[t.Dict[str, t.Any]]:
    """Each started job's result, in order, once all are done: ``exit_code`` (``None``: no status), ``stdout``,
    ``stderr`` (bytes), ``time``, ``timed_out`` (still running after ``timeout`` s, 0: none; its command killed) and
    ``lost`` (the agent did not take the command within :data:`TAKE_TIMEOUT`: it is gone, or was stopped)."""
    live = {fd: job for job in jobs for fd in job.fds}
    poller = select.poll()
    for fd in live:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout if timeout else None
    killed_at: t.Optional[float] = None
    unconfirmed = {id(job): job for job in jobs}
    lost: t.Set[int] = set()
    while live:
        now = time.monotonic()
        for key, job in list(unconfirmed.items()):
            if _taken(job):
                del unconfirmed[key]
            elif now - job.start >= TAKE_TIMEOUT:  # nobody took it: stop waiting for it
                del unconfirmed[key]
                lost.add(key)
                for fd in list(job.fds):
                    poller.unregister(fd)
                    del live[fd]
                job.end = now
        if not live:
            break
        if deadline is not None and now >= deadline and killed_at is None:
            killed_at = now
            for job in {id(j): j for j in live.values()}.values():
                _send(job, "kill %s\n" % job.ident)
        if killed_at is not None and now >= killed_at + KILL_GRACE:
            break
        ends = ([] if deadline is None else [deadline if killed_at is None else killed_at + KILL_GRACE]) + (
            [now + 0.1] if unconfirmed else [])
        wait = max(0.0, min(ends) - now) if ends else None
        for fd, _event in poller.poll(None if wait is None else int(wait * 1000) + 1):
            job = live[fd]
            chunk = os.read(fd, 65536)
            if chunk:
                job.data[job.fds[fd]] += chunk
                continue
            poller.unregister(fd)
            del live[fd]
            job.fds.pop(fd)
            os.close(fd)
            if not job.fds:
                job.end = time.monotonic()
    results = []
    for job in jobs:
        rc = bytes(job.data[".rc"]).strip()
        late = killed_at is not None and (job.end is None or job.end >= killed_at) and id(job) not in lost
        done = job.end is not None and rc.isdigit() and not late and id(job) not in lost
        results.append({"exit_code": int(rc) if done else None, "stdout": bytes(job.data[".out"]),
                        "stderr": bytes(job.data[".err"]), "time": (job.end or time.monotonic()) - job.start,
                        "timed_out": late, "lost": id(job) in lost})
        job.close()
    return results


def _taken(job: _Job) -> bool:
    """Whether the agent has started the job's command (it writes ``<id>.pid`` when it has)."""
    try:
        os.stat(job.ident + ".pid", dir_fd=job.dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True
