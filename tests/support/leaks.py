# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one leak check of this repository: what local sessions and agents leave on this machine, observed from
outside (stdlib only, needs root; it never imports the collection, so it cannot share a bug with it).

Every test that checks leftovers uses it: the pytest fixtures (``tests/conftest.py``: ``host_leaks``), the
local runtime tests (``tests/local_runtime/conftest.py``), Molecule's verify tests and its create/destroy
playbooks, which run it as a script::

    leaks.py snapshot FILE                                 the machine now (create)
    leaks.py record [--sessions DIR] [--agents DIR] [NAME...]   what sessions/agents made (before destroy)
    leaks.py check [--baseline FILE] < RECORD              JSON list of what is left (after destroy)

Two complementary checks, both reported by :func:`leaks`:

* the **snapshot diff** (:func:`snapshot` before, again after): wireguard-go processes and UAPI sockets
  (``/var/run/wireguard``, shared by every namespace) that appeared, network namespaces and links of any kind
  (veth, bridge, vxlan, dummy...) that appeared, addresses added to links that were there, every line of
  ``iptables-save`` in every table (filter, nat, mangle, raw, security) added or removed (packet counters
  ignored), ipsets that appeared (the session network's peer sets), the forwarding/route_localnet/bridge-netfilter
  sysctls changed, session state under
  ``/run/backendai-cluster`` (slots, IPAM leases, per-container and per-session files of the session network
  plugin; its installation there — lib, bin, configs, key — stays by design) and
  ``/run/backendai-cluster-mounts``, the containers' cgroups (``backendai-cluster.*`` in every cgroup
  hierarchy mounted, v1 or v2), and new processes (sshd, containers' commands...) living in a network
  namespace that was not there before or that has no name; engine (podman) containers, the storage of containers
  (``overlay-containers``) and volumes that appeared (images may appear: they stay, as an engine user expects), and
  engine containers' cgroups (``libpod-<id>``) that appeared and belong to no container that exists;
* the **record** (:func:`record`, read from the state directories before destroying): state directories, CNI
  configs, namespaces, bridge/veth/vxlan links and the peer sets named after the bridge, host addresses in the
  session's subnet, recorded processes
  (pid and start time), the containers' cgroups (recorded, or named after a recorded namespace), processes
  tagged with a state directory (``BACKENDAI_CLUSTER_LOCAL_OWNER``) or a session ID, and iptables rules naming
  the session's bridge, namespaces, addresses, subnet, published port or isolation comment, or in a chain
  recorded as the session's (portmap's ``CNI-DN-*``), and engine containers labelled with a session's state
  directory (``backendai-cluster.session``) and the cgroups of the session's engine containers (their IDs from the
  ``--cidfile`` files in its state directory). It works without a baseline (Molecule's first destroy)
  and finds a leftover of something that existed before the baseline.

Take the snapshots under the suite's machine lock (``tests/support/machine_lock.py``; a ``machine`` test holds it): a
change another run makes on this machine at the same time is reported as a leak.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import json
import os
import re
import subprocess
import sys
import typing as t

NETNS_DIR = "/run/netns"
#: the runtime tags every process it starts with the state directory of its session (or agents)
OWNER_ENV = "BACKENDAI_CLUSTER_LOCAL_OWNER"
SESSION_ENV = "BACKENDAI_SESSION_ID"
#: Carried by the process that holds a test's own unnamed network namespace (a test off the machine lock, e.g. a role
#: run under ``unshare --net``): what runs in that namespace is that test's, not something another test left.
OWN_NETNS_ENV = "BACKENDAI_CLUSTER_TESTS_OWN_NETNS"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TABLES = ("filter", "nat", "mangle", "raw", "security")
#: host-wide settings a session or an agent could turn on (the per-link ones go with their links)
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
           "net/ipv4/conf/all/route_localnet", "net/ipv4/conf/default/route_localnet",
           "net/ipv6/conf/all/forwarding", "net/bridge/bridge-nf-call-iptables")
RUN_ROOTS = ("/run/backendai-cluster", "/run/backendai-cluster-mounts")
#: wireguard-go's UAPI sockets (one directory for every network namespace: ``<interface>.sock``)
WIREGUARD_RUN = "/var/run/wireguard"
#: what under RUN_ROOTS belongs to a session (the rest is the session network plugin's installation)
RUN_SESSION_PARTS = ("slots", "ipam", "containers", "sessions")
#: how the local containers' cgroups are named at the top of each cgroup hierarchy (then the container's
#: network namespace)
CGROUP_PREFIX = "backendai-cluster."

Snapshot = t.Dict[str, t.Any]
Record = t.Dict[str, t.Any]


def _start(*cmd: str) -> "subprocess.Popen[str]":
    """A command started now; :func:`_output` reads what it printed. A snapshot starts all of its commands at once (they
    wait on the kernel's netlink and on podman's start, not on each other) and reads this machine's files meanwhile."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={"PATH": PATH})


def _output(proc: "subprocess.Popen[str]") -> str:
    return proc.communicate()[0]


def _read_json(path: str) -> t.Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _journal(path: str) -> t.List[t.Dict[str, t.Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _inode(path: str) -> t.Optional[int]:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


# ------------------------------------------------------------------ what is on the machine now

def netns() -> t.Dict[str, t.Optional[int]]:
    """Named network namespace -> its inode."""
    names = sorted(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else []
    return {n: _inode(os.path.join(NETNS_DIR, n)) for n in names}


LINKS = ("ip", "-d", "-j", "addr", "show")


def links(text: str) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Link of this (the host's) namespace -> {"kind", "master", "addresses"} (``text``: what :data:`LINKS` printed)."""
    data = json.loads(text or "[]")
    return {link["ifname"]: {"kind": (link.get("linkinfo") or {}).get("info_kind", ""),
                             "master": link.get("master", ""),
                             "addresses": sorted("%s/%s" % (a["local"], a["prefixlen"]) for a in link.get("addr_info", [])
                                                 if "local" in a)}
            for link in data}


def _iptables_save(table: str) -> t.Tuple[str, ...]:
    return ("iptables-save", "-t", table)


def iptables(texts: t.Mapping[str, str]) -> t.Dict[str, t.List[str]]:
    """Table -> its chains and rules (``iptables-save`` without packet counters; ``texts``: table -> what
    ``iptables-save -t TABLE`` printed)."""
    return {table: sorted(re.sub(r" \[\d+:\d+\]$", "", line) for line in texts[table].splitlines()
                          if line.startswith((":", "-A "))) for table in TABLES}


def _has(tool: str) -> bool:
    return any(os.access(os.path.join(d, tool), os.X_OK) for d in PATH.split(":"))


IPSETS = ("ipset", "list", "-n")


def ipsets(text: str) -> t.List[str]:
    """The names of this (the host's) namespace's ipsets: the session network plugin makes one per session and agent,
    of its peers' addresses (``<bridge>-peers``, ``<bridge>-peers6``). ``text``: what :data:`IPSETS` printed (empty
    without the ipset tool)."""
    return sorted(n for n in text.split() if n)


#: What the names of a session's peer sets add to its bridge's name.
IPSET_SUFFIXES = ("-peers", "-peers6")


def sysctls() -> t.Dict[str, str]:
    out = {}
    for name in SYSCTLS:
        try:
            with open("/proc/sys/" + name, encoding="ascii") as f:
                out[name.replace("/", ".")] = f.read().strip()
        except OSError:
            pass  # (bridge-nf-call-* exist only once br_netfilter is loaded)
    return out


def run_state() -> t.List[str]:
    """Files and directories of sessions under RUN_ROOTS."""
    out = []
    for root in RUN_ROOTS:
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("lib", "bin", "__pycache__")]
            for name in dirs + files:
                path = os.path.join(top, name)
                rel = os.path.relpath(path, root).split(os.sep)
                if root != RUN_ROOTS[0] or any(p in RUN_SESSION_PARTS for p in rel[:-1]):
                    out.append(path)
    return sorted(out)


def cgroup_mounts() -> t.List[str]:
    """Every cgroup hierarchy (v1 and v2) mounted on this machine."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        pre, _sep, post = line.partition(" - ")
        if post.split()[:1] in (["cgroup"], ["cgroup2"]):
            out.append(pre.split()[4].replace("\\040", " "))
    return sorted(set(out))


def cgroups() -> t.List[str]:
    """The local containers' cgroups that exist now."""
    out = []
    for mount in cgroup_mounts():
        try:
            out += [os.path.join(mount, n) for n in os.listdir(mount)
                    if n.startswith(CGROUP_PREFIX) and os.path.isdir(os.path.join(mount, n))]
        except OSError:
            pass
    return sorted(out)


#: Where podman puts a container's cgroup in a hierarchy (``libpod-<64 hex id>``): under the cgroupfs manager's parent
#: (podman without systemd) or the systemd manager's slice.
ENGINE_CGROUPS = ("libpod_parent/libpod-*", "machine.slice/libpod-*.scope")
#: The file in a local container's directory that ``podman run --cidfile`` writes its ID into.
ENGINE_CIDFILE = "containers/*/cid"


def _cgroup_id(path: str) -> str:
    """The container ID of an engine container's cgroup directory."""
    return os.path.basename(path)[len("libpod-"):].split(".", 1)[0]


def engine_cgroups() -> t.List[str]:
    """The engine (podman) containers' cgroups that exist now, in every hierarchy: a ``podman run`` killed half-way
    leaves its container's behind (empty) after the container is removed."""
    return sorted(d for m in cgroup_mounts() for pattern in ENGINE_CGROUPS for d in glob.glob(os.path.join(m, pattern))
                  if os.path.isdir(d))


def _proc_starttime(pid: int) -> t.Optional[int]:
    """The start time of a live process (None: gone or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def processes() -> t.Dict[str, t.Dict[str, t.Any]]:
    """"pid:starttime" -> {"pid", "netns" (inode), "cmd", "env" (the tags it carries)} of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        start = _proc_starttime(int(entry))
        if start is None:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        env: t.List[str] = []
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = [v.decode("utf-8", "replace") for v in f.read().split(b"\0")
                       if v.startswith((OWNER_ENV.encode() + b"=", SESSION_ENV.encode() + b"=",
                                        OWN_NETNS_ENV.encode() + b"="))]
        except OSError:
            pass  # (not ours to read: e.g. the sandbox's init)
        out["%s:%d" % (entry, start)] = {"pid": int(entry), "netns": _inode("/proc/%s/ns/net" % entry),
                                         "cmd": cmd[:200], "env": env}
    return out


def tests_own_netns(now: Snapshot) -> t.Set[t.Any]:
    """The network namespaces a test off the machine lock made for itself and holds (a process in each carries
    :data:`OWN_NETNS_ENV`): another test's, running beside, not a leftover."""
    return {p["netns"] for p in now["processes"].values()
            if any(v.startswith(OWN_NETNS_ENV + "=") for v in p["env"])}


def wireguard_sockets() -> t.List[str]:
    """The interfaces with a wireguard-go UAPI socket (in any network namespace)."""
    try:
        return sorted(n[:-len(".sock")] for n in os.listdir(WIREGUARD_RUN) if n.endswith(".sock"))
    except FileNotFoundError:
        return []


def _wireguard_go(proc: t.Mapping[str, t.Any]) -> str:
    """The interface a wireguard-go process serves ('' for any other process)."""
    argv = str(proc["cmd"]).split()
    return argv[-1] if len(argv) >= 2 and os.path.basename(argv[0]) == "wireguard-go" else ""


#: The label the local backend puts on its engine containers: the session's state directory.
ENGINE_LABEL = "backendai-cluster.session"
#: podman's (root) storage of containers: one directory per container, removed with it.
ENGINE_STORAGE = "/var/lib/containers/storage/overlay-containers"


#: Every engine container: its ID, name and the label the local backend puts on it (empty on any other container).
ENGINE_CONTAINERS = ("podman", "ps", "--all", "--format", "{{.ID}} {{.Names}} {{index .Labels \"%s\"}}" % ENGINE_LABEL)
ENGINE_VOLUMES = ("podman", "volume", "ls", "--quiet")


def engine(texts: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
    """Podman's containers (id and name), their storage directories and volumes. ``texts``: what
    :data:`ENGINE_CONTAINERS` and :data:`ENGINE_VOLUMES` printed ("containers", "volumes")."""
    rows = [line.split(" ", 2) for line in texts["containers"].split("\n") if line.strip()]
    storage = sorted(os.listdir(ENGINE_STORAGE)) if os.path.isdir(ENGINE_STORAGE) else []
    return {"containers": sorted("%s %s" % (row[0], row[1]) for row in rows if len(row) > 1),
            "storage": [s for s in storage if len(s) == 64],
            "volumes": sorted(v for v in texts["volumes"].split() if v),
            # (state directory, name) of the containers the local backend labelled with their session's directory
            "labelled": sorted([row[2], row[1]] for row in rows if len(row) > 2 and row[2])}


def snapshot() -> Snapshot:
    """Everything :func:`leaks` compares (JSON-serialisable). Its commands run at once, and the files of this machine
    (/proc, /sys, /run) are read while they run."""
    commands: t.Dict[str, t.Tuple[str, ...]] = {"links": LINKS}
    commands.update(("iptables " + table, _iptables_save(table)) for table in TABLES)
    if _has("ipset"):
        commands["ipsets"] = IPSETS
    has_engine = _has("podman")
    if has_engine:
        commands.update(containers=ENGINE_CONTAINERS, volumes=ENGINE_VOLUMES)
    started = {key: _start(*argv) for key, argv in commands.items()}
    snap = {"netns": netns(), "sysctls": sysctls(), "run": run_state(), "processes": processes(),
            "host_netns": _inode("/proc/self/ns/net"), "cgroups": cgroups(), "wireguard": wireguard_sockets(),
            "engine_cgroups": engine_cgroups()}
    texts = {key: _output(proc) for key, proc in started.items()}
    snap.update(links=links(texts["links"]), iptables=iptables({table: texts["iptables " + table] for table in TABLES}),
                ipsets=ipsets(texts.get("ipsets", "")), engine=engine(texts) if has_engine else {})
    return snap


# ------------------------------------------------------------------ what sessions and agents made

def record(sessions_root: t.Optional[str] = None, names: t.Iterable[str] = (), agents_root: t.Optional[str] = None,
           ) -> Record:
    """What the sessions (``names`` under ``sessions_root``, or all of them) and the local agents under
    ``agents_root`` made, read from their state directories and this machine before they are destroyed."""
    rec: Record = {"dirs": [], "session_ids": [], "netns": [], "links": [], "subnets": [],
                   "addresses": [], "pids": [], "ports": [], "chains": [], "conflists": [], "names": [], "cgroups": [],
                   "wireguard": [], "engine_ids": []}
    started = {"links": _start(*LINKS), **{table: _start(*_iptables_save(table)) for table in TABLES}}  # (at once)
    session_dirs = []
    if sessions_root:
        root = os.path.abspath(sessions_root)
        session_dirs = [os.path.join(root, n) for n in names] if names else sorted(
            d for d in glob.glob(os.path.join(root, "*")) if os.path.isdir(d))
    now_links = links(_output(started.pop("links")))
    for d in session_dirs:
        rec["names"].append(os.path.basename(d))
        rec["dirs"].append(d)
        info = _read_json(os.path.join(d, "session.json")) or {}
        entries = _journal(os.path.join(d, "journal"))
        begin = next((e for e in entries if e.get("op") == "begin"), {})
        sid = info.get("session_id") or begin.get("session_id")
        if sid:
            rec["session_ids"].append(sid)
        containers = info.get("containers") or []
        rec["netns"] += [c["netns"] for c in containers if c.get("netns")] or list(begin.get("netns") or [])
        for e in entries:
            if e.get("op") in ("netns", "network"):
                rec["netns"] += list(e.get("names") or e.get("netns") or [])
            elif e.get("op") == "cgroups":
                rec["cgroups"] += list(e.get("dirs") or [])
        rec["cgroups"] += [d for c in containers for d in c.get("cgroups") or []]
        bridges = [b for b in (info.get("bridge"), begin.get("bridge"), info.get("vxlan")) if b]
        rec["links"] += bridges + [n for n, link in now_links.items() if link["master"] in bridges]
        if info.get("subnet"):
            rec["subnets"].append(info["subnet"])
        rec["addresses"] += [c["address"] for c in containers if c.get("address")]
        rec["pids"] += [[c[pid], c.get(start)] for c in containers
                        for pid, start in (("pid", "pid_starttime"), ("sshd_pid", "sshd_starttime")) if c.get(pid)]
        if info.get("published"):
            rec["ports"].append(int(str(info["published"]).rpartition(":")[2]))
        for cidfile in glob.glob(os.path.join(d, ENGINE_CIDFILE)):  # its engine containers' IDs (their cgroups)
            try:
                with open(cidfile, encoding="ascii") as f:
                    rec["engine_ids"].append(f.read().strip())
            except (OSError, ValueError):
                pass
    if agents_root:
        for d in sorted(x for x in glob.glob(os.path.join(os.path.abspath(agents_root), "*")) if os.path.isdir(x)):
            rec["names"].append("agents " + os.path.basename(d))
            rec["dirs"].append(d)
            for e in _journal(os.path.join(d, "journal")):
                if e.get("op") == "netns":
                    rec["netns"] += list(e.get("names") or [])
                elif e.get("op") == "wireguard":  # each agent's WireGuard interface (and its wireguard-go)
                    rec["wireguard"] += list((e.get("interfaces") or {}).values())
            rec["conflists"] += glob.glob(os.path.join(d, "cni", "*", "*.conflist"))
    # a container's cgroups are named after its namespace: also those of a creator killed before recording them
    rec["cgroups"] += [os.path.join(m, CGROUP_PREFIX + n) for m in cgroup_mounts() for n in rec["netns"]]
    for key in ("netns", "links", "cgroups"):
        rec[key] = sorted(set(rec[key]))
    for table, lines in iptables({table: _output(proc) for table, proc in started.items()}).items():
        for line in lines:
            if line.startswith("-A ") and _mentions(line, _tokens(rec)):
                chain = line.split()[1]
                if chain.startswith("CNI-DN-") and [table, chain] not in rec["chains"]:
                    rec["chains"].append([table, chain])  # portmap's per-container chain
    return rec


def _tokens(rec: Record, addresses: bool = True) -> t.List[str]:
    """Words only a rule of these sessions contains."""
    return list(rec["links"]) + list(rec["netns"]) + list(rec["subnets"]) + (list(rec["addresses"]) if addresses else [])


def _mentions(line: str, tokens: t.Iterable[str]) -> bool:
    words = set(re.split(r"[\s\"/:,]+", line)) | set(re.findall(r"\S+/\d+", line))
    return any(tok in words or ('"%s"' % tok) in line for tok in tokens)


# ------------------------------------------------------------------ the check

def _diff(before: Snapshot, after: Snapshot) -> t.List[str]:
    left = ["network namespace %s" % n for n in after["netns"] if n not in before["netns"]]
    for name, link in after["links"].items():
        was = before["links"].get(name)
        if was is None:
            left.append("%s link %s" % (link["kind"] or "plain", name))
        else:
            left += ["address %s on %s" % (a, name) for a in link["addresses"] if a not in was["addresses"]]
    for table in TABLES:
        old, new = set(before["iptables"].get(table, [])), set(after["iptables"].get(table, []))
        left += ["iptables -t %s added: %s" % (table, line) for line in sorted(new - old)]
        left += ["iptables -t %s removed: %s" % (table, line) for line in sorted(old - new)]
    left += ["ipset %s" % n for n in after.get("ipsets", []) if n not in before.get("ipsets", [])]
    left += ["sysctl %s: %s -> %s" % (k, before["sysctls"].get(k), v) for k, v in after["sysctls"].items()
             if before["sysctls"].get(k, v) != v]
    left += ["session state %s" % p for p in after["run"] if p not in before["run"]]
    left += ["cgroup %s" % d for d in after.get("cgroups", []) if d not in before.get("cgroups", [])]
    left += ["WireGuard UAPI socket %s/%s.sock" % (WIREGUARD_RUN, n) for n in after.get("wireguard", [])
             if n not in before.get("wireguard", [])]
    left += ["wireguard-go process %d (%s)" % (proc["pid"], _wireguard_go(proc)) for key, proc in after["processes"].items()
             if _wireguard_go(proc) and key not in before["processes"]]
    was, now = before.get("engine") or {}, after.get("engine") or {}
    for kind, what in (("containers", "engine container"), ("storage", "engine container storage"), ("volumes", "engine volume")):
        left += ["%s %s" % (what, x) for x in now.get(kind, []) if x not in was.get(kind, [])]
    # a new engine cgroup of no container that exists (another run's containers on this machine have theirs)
    existing = {c.split()[0] for c in now.get("containers", []) if c}
    left += ["engine cgroup %s (of no container)" % d for d in after.get("engine_cgroups", [])
             if d not in before.get("engine_cgroups", []) and _cgroup_id(d)[:12] not in existing]
    known = {before["host_netns"]} | {i for i in before["netns"].values()} | {
        p["netns"] for p in before["processes"].values()} | tests_own_netns(after)
    for key, proc in after["processes"].items():
        if key not in before["processes"] and proc["netns"] not in known:
            left.append("process %d in a network namespace made since: %s" % (proc["pid"], proc["cmd"]))
    return left


def _from_record(rec: Record, now: Snapshot) -> t.List[str]:
    left = ["state directory %s" % d for d in rec["dirs"] if os.path.lexists(d)]
    left += ["CNI config %s" % c for c in rec["conflists"] if os.path.exists(c)]
    left += ["network namespace %s" % n for n in rec["netns"] if n in now["netns"]]
    left += ["cgroup %s" % d for d in rec.get("cgroups", []) if os.path.isdir(d)]
    ids = set(rec.get("engine_ids", []))
    left += ["engine cgroup %s of the session's container" % d for d in now.get("engine_cgroups", []) if _cgroup_id(d) in ids]
    left += ["link %s" % n for n in rec["links"] if n in now["links"]]
    left += ["ipset %s" % n for n in now.get("ipsets", []) if any(n == link + x for link in rec["links"] for x in IPSET_SUFFIXES)]
    subnets = [ipaddress.ip_network(s, strict=False) for s in rec["subnets"]]
    reused = False  # a subnet (so its addresses) now belongs to another session's bridge
    for name, link in now["links"].items():
        for a in link["addresses"]:
            if any(ipaddress.ip_interface(a).ip in s for s in subnets):
                if name in rec["links"]:
                    left.append("host address %s on %s" % (a, name))
                else:
                    reused = True
    tokens = _tokens(rec, addresses=not reused)
    chains = {tuple(c) for c in rec["chains"]}
    for table, lines in now["iptables"].items():
        for line in lines:
            chain = line[1:].split()[0] if line.startswith(":") else line.split()[1]
            if (table, chain) in chains:
                left.append("iptables -t %s chain %s" % (table, chain))
            elif line.startswith("-A ") and (
                    _mentions(line, tokens) or any("session %s isolation" % n in line for n in rec["names"])
                    or any(re.search(r"--dports? (\S+,)?%d\b" % p, line) for p in rec["ports"])):
                left.append("iptables -t %s rule %s" % (table, line))
    for name in rec.get("wireguard", []):
        if name in now.get("wireguard", []):
            left.append("WireGuard UAPI socket %s/%s.sock" % (WIREGUARD_RUN, name))
        left += ["wireguard-go process %d (%s)" % (proc["pid"], name) for proc in now["processes"].values()
                 if _wireguard_go(proc) == name]
    dirs = set(rec["dirs"])
    left += ["engine container %s of %s" % (n, d) for d, n in (now.get("engine") or {}).get("labelled", []) if d in dirs]
    for pid, start in rec["pids"]:
        if start is not None and _proc_starttime(pid) == start:
            left.append("process %d (recorded, still running)" % pid)
    # a state directory is also the owner tag of what it runs (_local.state.owner_env)
    tags = {"%s=%s" % (OWNER_ENV, d) for d in rec["dirs"]} | {"%s=%s" % (SESSION_ENV, s) for s in rec["session_ids"]}
    for proc in now["processes"].values():
        if tags & set(proc["env"]) or any(d in proc["cmd"] for d in rec["dirs"]):
            left.append("process %d of the session: %s" % (proc["pid"], proc["cmd"]))
    return left


def leaks(before: t.Optional[Snapshot] = None, rec: t.Optional[Record] = None,
          after: t.Optional[Snapshot] = None) -> t.List[str]:
    """What is left: the difference from ``before`` (if given) and what ``rec`` says was made (if given),
    on the machine as it is ``after`` (default: now). Empty: nothing."""
    after = after if after is not None else snapshot()
    left = _diff(before, after) if before is not None else []
    if rec is not None:
        left += _from_record(rec, after)
    # an unnamed namespace with a process in it outlived its name (its netns was deleted, a process kept it)
    named = set(after["netns"].values()) | {after["host_netns"], None} | tests_own_netns(after)
    for key, proc in after["processes"].items():
        if before is not None and proc["netns"] not in named and key not in before["processes"]:
            left.append("process %d in an unnamed network namespace: %s" % (proc["pid"], proc["cmd"]))
    return sorted(set(left))


def merge(records: t.Iterable[Record]) -> t.Optional[Record]:
    """One record of several (None: none)."""
    out: t.Optional[Record] = None
    for rec in records:
        if out is None:
            out = {k: list(v) for k, v in rec.items()}
        else:
            for k, v in rec.items():
                out[k] = out.get(k, []) + [x for x in v if x not in out.get(k, [])]
    return out


class LeakCheck:
    """A snapshot of the machine now; :meth:`record` what sessions/agents made (before destroying them);
    :meth:`assert_clean` once they are gone."""

    def __init__(self) -> None:
        self.before = snapshot()
        self.records: t.List[Record] = []

    def record(self, sessions_root: t.Optional[str] = None, names: t.Iterable[str] = (),
               agents_root: t.Optional[str] = None) -> Record:
        rec = record(sessions_root, names, agents_root)
        self.records.append(rec)
        return rec

    def left(self) -> t.List[str]:
        return leaks(self.before, merge(self.records))

    def assert_clean(self) -> None:
        left = self.left()
        assert not left, ("left behind (or changed by a process not holding the machine lock, tests/support/machine_lock.py):\n  "
                          + "\n  ".join(left))


# ------------------------------------------------------------------ command line (Molecule's playbooks)

def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(prog="leaks.py", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("file")
    rec = sub.add_parser("record")
    rec.add_argument("--sessions")
    rec.add_argument("--agents")
    rec.add_argument("names", nargs="*")
    chk = sub.add_parser("check")
    chk.add_argument("--baseline")
    args = parser.parse_args(argv)
    if args.cmd == "snapshot":
        os.makedirs(os.path.dirname(os.path.abspath(args.file)), exist_ok=True)
        with open(args.file, "w", encoding="utf-8") as f:
            json.dump(snapshot(), f)
    elif args.cmd == "record":
        json.dump(record(args.sessions, args.names, args.agents), sys.stdout)
    else:
        baseline = _read_json(args.baseline) if args.baseline else None
        json.dump(leaks(baseline, json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
