# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starting a local container: one fork of the runtime makes its cgroups, namespaces and mounts, then the
container's init is exec'd.

What ``setsid -f nsenter --net=NS -- unshare --uts --mount --propagation private --ipc --pid --fork
--kill-child -- sh init.sh`` and four ``mount -a`` runs in init.sh did, this does with system calls, in a
child of the runtime (:func:`spawn`):

* the *setup* child: ``setsid``; joins the container's cgroups (``0`` into each ``cgroup.procs``: its
  descendants, the whole container, are born in them); enters the container's network namespace
  (``setns``); unshares mount, UTS, IPC and PID namespaces; makes every mount private (nothing it mounts
  reaches the machine); sets the hostname; makes the container's mounts (:func:`mount_all`, the entries
  ``_local.containers`` renders); forks
* the container's *init*: the first process of the new PID namespace, which mounts the container's /proc
  (a proc mount shows the PID namespace of the process that makes it), sets no_new_privs (inherited
  by everything of the container: sshd, logins, the user's command), restores the signal dispositions
  Python changed, leaves only stdin (/dev/null), stdout and stderr (the container's system log) open and
  execs ``/bin/sh init.sh``.

The setup child exits at once: the init is reparented to the machine's init (or the caller's subreaper),
never a child of the caller, as ``setsid -f`` made it (an Ansible module exits long before its containers
do). Killing the init kills every process of the container (the kernel's rule for a PID namespace), as
before; there is no ``unshare`` parent any more whose death would take the container down
(``--kill-child``): destroy kills the container's processes by their network namespace anyway.

The setup child reports on a pipe: the init's pid on the machine, or what failed; the pipe's end closes
when the init's exec succeeds (close-on-exec), so :func:`wait_started` returns once every init runs, with no
polling. Eight exec'd programs per container (setsid, nsenter, unshare, four mounts, setpriv: each a few ms of
CPU on a small machine, every ``mount -a`` parsing the mount table too) become none.

The child runs only system calls between fork and exec (everything it needs is prepared before the fork),
the way ``subprocess`` runs a ``preexec_fn``. System call numbers and flags: Linux
``include/uapi/linux/sched.h`` (CLONE_*), ``include/uapi/linux/mount.h`` (MS_*), ``include/uapi/linux/prctl.h``.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import stat
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._files import write_all
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError, tail_lines

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

#: fstab options that are mount flags; every other option goes to the filesystem (tmpfs ``mode=``, ``size=``)
FLAG_OPTIONS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
#: the one option of util-linux mount's that is not the kernel's: make the target directory first (0755)
MKDIR_OPTION = "X-mount.mkdir"
#: an entry (source, target, "none", MOVE_OPTION) moves the mount at source to target (``mount --move``)
MOVE_OPTION = "move"
#: entries that make a file instead of mounting: (``major:minor``, target, NODE_TYPE, "") a character device of mode
#: 0666 (``mknod``), (link text, target, LINK_TYPE, "") a symbolic link; both in a directory mounted before
NODE_TYPE = "X-mknod"
LINK_TYPE = "X-symlink"
INIT_SHELL = "/bin/sh"
#: closerange's end: no descriptor is at or above the open-files limit (os.closerange uses close_range(2)
#: where the kernel has it, else closes one by one)
MAX_FD = os.sysconf("SC_OPEN_MAX") if "SC_OPEN_MAX" in os.sysconf_names else 65536

_LIBC: t.List[ctypes.CDLL] = []


def libc() -> ctypes.CDLL:
    """The C library (loaded once, before any fork: the children only call into it)."""
    if not _LIBC:
        lib = ctypes.CDLL(None, use_errno=True)
        # mount(2)'s flags are an unsigned long (the other calls take ints, ctypes' default)
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _LIBC.append(lib)
    return _LIBC[0]


class MountCall(t.NamedTuple):
    """One mount(2) call (``source``/``fstype``/``data`` None: NULL), and the directory to make first."""

    source: t.Optional[bytes]
    target: bytes
    fstype: t.Optional[bytes]
    flags: int
    data: t.Optional[bytes]
    mkdir: bool


def mount_calls(entries: t.Iterable[t.Tuple[str, str, str, str]]) -> t.List[MountCall]:
    """The mount(2) calls that make the fstab-style ``entries`` (source, target, type, options), in order,
    as ``mount -n -a`` and ``mount --move`` do: a bind is one call, plus a remount when it has flags (the
    kernel ignores the flags of the bind call itself); ``ro`` and the like are flags, the rest of the
    options the filesystem's data."""
    calls = []
    for source, target, fstype, options in entries:
        opts = [o for o in options.split(",") if o]
        flags = 0
        data = []
        for o in opts:
            if o in FLAG_OPTIONS:
                flags |= FLAG_OPTIONS[o]
            elif o not in ("bind", MKDIR_OPTION, MOVE_OPTION):
                data.append(o)
        src, dst = source.encode(), target.encode()
        mkdir = MKDIR_OPTION in opts
        if fstype in (NODE_TYPE, LINK_TYPE):
            calls.append(MountCall(src, dst, fstype.encode(), 0, None, False))
        elif MOVE_OPTION in opts:
            calls.append(MountCall(src, dst, None, MS_MOVE, None, mkdir))
        elif "bind" in opts:
            calls.append(MountCall(src, dst, None, MS_BIND, None, mkdir))
            if flags:
                calls.append(MountCall(None, dst, None, MS_REMOUNT | MS_BIND | flags, None, False))
        else:
            calls.append(MountCall(src, dst, fstype.encode(), flags, ",".join(data).encode() or None, mkdir))
    return calls


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def mount_all(calls: t.Iterable[MountCall]) -> None:
    """Make the mounts (in this process's mount namespace); raises OSError naming the one that failed."""
    mount = libc().mount
    for c in calls:
        if c.fstype == NODE_TYPE.encode():
            major, minor = (int(x) for x in (c.source or b"").split(b":"))
            os.mknod(c.target, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(c.target, 0o666)  # (mknod's mode is masked by the umask)
            continue
        if c.fstype == LINK_TYPE.encode():
            os.symlink(c.source or b"", c.target)
            continue
        if c.mkdir and not os.path.lexists(c.target):
            os.makedirs(c.target, 0o755)
        _check(mount(c.source, c.target, c.fstype, c.flags, c.data),
               "mount %s on %s" % ((c.source or b"").decode(errors="replace"), c.target.decode(errors="replace")))


class Container(t.NamedTuple):
    """Everything the setup child needs, prepared before the fork."""

    hostname: str
    netns: str               # path of the network namespace to enter
    cgroup_procs: t.List[str]  # each cgroup's ``cgroup.procs``
    mounts: t.List[MountCall]
    proc_mounts: t.List[MountCall]  # made by the init, in the new PID namespace
    init: t.List[str]        # the init's argv (INIT_SHELL and its script)
    env: t.Dict[str, str]
    log: str                 # stdout and stderr of the init


class Starting(t.NamedTuple):
    hostname: str
    setup_pid: int
    report: int  # read end of the setup child's pipe
    log: str


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return "%s: %s" % (e.filename, e.strerror) if e.filename else e.strerror
    return str(e) or type(e).__name__


def _close_all_but(*keep: int) -> None:
    """Close every file descriptor from 3 on but ``keep``."""
    start = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, MAX_FD)


def _tell_failure(report: int, log: int, what: str, logged: str, e: BaseException) -> None:
    """Say why the start failed on the pipe (``!`` + reason) and in the container's system log (if open)."""
    for fd, line in ((report, "!" + what), (log, "backendai.cluster: " + logged)):
        try:
            write_all(fd, (line + _reason(e) + "\n").encode(errors="replace"))
        except BaseException:  # pylint: disable=broad-exception-caught
            pass


def _init(c: Container, report: int, log: int) -> None:
    """The container's init, in the new PID namespace, until its exec; never returns."""
    try:
        mount_all(c.proc_mounts)
        _check(libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # what Python ignores (subprocess's restore_signals)
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # nothing of the runtime's reaches the container: the setup child closed every inherited fd but the pipe
        # (before it opened the log), and the pipe, the log and /dev/null's fd here are close-on-exec
        os.chdir("/")
        os.execve(c.init[0], c.init, c.env)
    except BaseException as e:  # pylint: disable=broad-exception-caught
        _tell_failure(report, log, "init: ", "container init failed: ", e)
    os._exit(127)


def _setup(c: Container, report: int, creator: int) -> None:
    """The setup child (see the module docstring); never returns."""
    code = 1
    log = -1
    try:
        # Dies with its creator: a creator killed half-way leaves no set-up going on that destroy could miss (this
        # process carries no owner tag and is in no session namespace yet; the init it forks is in the session's
        # network namespace from the start, and the pdeath signal is not inherited by it).
        _check(libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != creator:
            os._exit(1)
        # none of the runtime's files from here on (they are close-on-exec, but this process never execs): a lock
        # the creator holds must go when the creator goes
        _close_all_but(report)
        os.setsid()
        # (opened before the mounts: they may hide it, e.g. a state directory under /tmp)
        log = os.open(c.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        for procs in c.cgroup_procs:
            with open(procs, "w", encoding="ascii") as f:
                f.write("0")
        fd = os.open(c.netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(libc().setns(fd, CLONE_NEWNET), "setns(%s)" % c.netns)
        finally:
            os.close(fd)
        _check(libc().unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")
        _check(libc().mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
        socket.sethostname(c.hostname)
        mount_all(c.mounts)
        pid = os.fork()
        if pid == 0:
            _init(c, report, log)
        write_all(report, b"%d\n" % pid)
        code = 0
    except BaseException as e:  # pylint: disable=broad-exception-caught
        _tell_failure(report, log, "", "container set-up failed: ", e)
    os._exit(code)


def spawn(c: Container) -> Starting:
    """Fork the container's setup child (see the module docstring); :func:`wait_started` collects it."""
    libc()
    creator = os.getpid()
    read_end, write_end = os.pipe()  # both close-on-exec
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            _setup(c, write_end, creator)
        finally:
            os._exit(1)
    os.close(write_end)
    return Starting(c.hostname, pid, read_end, c.log)


def wait_started(starting: Starting) -> int:
    """The container's init pid on this machine, once it runs ``init.sh``; LocalRuntimeError if it could not start."""
    chunks = []
    try:
        # os.read and os.waitpid retry on EINTR themselves (PEP 475)
        for chunk in iter(lambda: os.read(starting.report, 4096), b""):
            chunks.append(chunk)
    finally:
        os.close(starting.report)
    try:
        os.waitpid(starting.setup_pid, 0)
    except ChildProcessError:
        pass
    lines = b"".join(chunks).decode(errors="replace").splitlines()
    errors = [line[1:] for line in lines if line.startswith("!")]
    pids = [int(line) for line in lines if line.isdigit()]
    if errors or not pids:
        detail = "; ".join(errors) or "its set-up process ended without a word:\n" + "\n".join(tail_lines(starting.log, 10))
        raise LocalRuntimeError("could not start container %s: %s" % (starting.hostname, detail))
    return pids[0]


__all__ = ["LINK_TYPE", "NODE_TYPE", "Container", "MountCall", "Starting", "mount_all", "mount_calls", "spawn",
           "wait_started"]
