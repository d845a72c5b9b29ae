# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a local session leaves on this machine, observed from outside (stdlib only, needs root).

    leftovers.py record STATE_ROOT NAME...   (before destroy) JSON: what each session made
    leftovers.py check < RECORD              (after destroy) JSON list of what is still there

``record`` reads the session's state directory (session.json, or the journal of a create that did
not finish) and the host (veths on the session's bridge, iptables chains holding its rules);
``check`` looks for every one of those things again, plus any process carrying the session's ID or
owner tag in its environment. Used by destroy.yml and by the verify tests (second session).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import typing as t

NETNS_DIR = "/run/netns"
OWNER_ENV = "BACKENDAI_CLUSTER_LOCAL_OWNER"  # the runtime tags its processes with the state dir
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TABLES = ("filter", "nat", "mangle", "raw")


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env={"PATH": PATH}).stdout


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
            out.append(json.loads(line))
        except ValueError:
            pass
    return [e for e in out if isinstance(e, dict)]


def iptables_rules() -> t.Dict[str, t.List[str]]:
    """table -> lines of ``iptables-save`` (chains and rules)."""
    return {table: [line for line in _run("iptables-save", "-t", table).splitlines()
                    if line.startswith((":", "-A "))] for table in TABLES}


def _mentions(line: str, tokens: t.Iterable[str]) -> bool:
    words = set(re.split(r"[\s\"/:,]+", line))
    return any(tok in words or ('"%s"' % tok) in line for tok in tokens)


def _tokens(rec: t.Mapping[str, t.Any], addresses: bool = True) -> t.List[str]:
    """Words that only a rule of this session contains."""
    tokens = [rec["bridge"]] if rec.get("bridge") else []
    tokens += rec.get("netns", []) + (rec.get("addresses", []) if addresses else [])
    if rec.get("network"):
        tokens.append(rec["network"])
    return tokens


def record(state_root: str, name: str) -> t.Dict[str, t.Any]:
    state_dir = os.path.join(os.path.abspath(state_root), name)
    info = _read_json(os.path.join(state_dir, "session.json")) or {}
    begin = next((e for e in _journal(os.path.join(state_dir, "journal")) if e.get("op") == "begin"), {})
    containers = info.get("containers", [])
    rec: t.Dict[str, t.Any] = {
        "name": name, "state_dir": state_dir, "existed": os.path.isdir(state_dir),
        "session_id": info.get("session_id") or begin.get("session_id"),
        "bridge": info.get("bridge") or begin.get("bridge"), "network": begin.get("network"),
        "subnet": info.get("subnet"),
        "netns": [c["netns"] for c in containers] or list(begin.get("netns", [])),
        "addresses": [c["address"] for c in containers if c.get("address")],
        "pids": [[c[pid], c.get(start)] for c in containers
                 for pid, start in (("pid", "pid_starttime"), ("sshd_pid", "sshd_starttime")) if c.get(pid)],
        "published_port": None, "veths": [], "chains": [],
    }
    if info.get("published"):
        rec["published_port"] = int(str(info["published"]).rpartition(":")[2])
    if rec["bridge"]:
        links = json.loads(_run("ip", "-j", "link", "show") or "[]")
        rec["veths"] = [link["ifname"] for link in links if link.get("master") == rec["bridge"]]
    tokens = _tokens(rec)
    for table, lines in iptables_rules().items():
        for line in lines:
            if line.startswith("-A ") and _mentions(line, tokens):
                chain = line.split()[1]
                if chain.startswith("CNI-DN-") and [table, chain] not in rec["chains"]:
                    rec["chains"].append([table, chain])  # portmap's per-container chain
    return rec


def _proc_starttime(pid: int) -> t.Optional[int]:
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _tagged_processes(tags: t.Iterable[bytes]) -> t.List[int]:
    wanted = set(tags)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if env & wanted and _proc_starttime(int(entry)) is not None:
            found.append(int(entry))
    return found


def check(rec: t.Mapping[str, t.Any]) -> t.List[str]:
    """What is still there of the recorded session (empty: nothing)."""
    left = []
    name = rec["name"]
    if os.path.lexists(rec["state_dir"]):
        left.append("%s: state directory %s" % (name, rec["state_dir"]))
    for ns in rec.get("netns", []):
        if os.path.lexists(os.path.join(NETNS_DIR, ns)):
            left.append("%s: network namespace %s" % (name, ns))
    links = {link["ifname"]: link for link in json.loads(_run("ip", "-j", "link", "show") or "[]")}
    for link in [rec.get("bridge")] + list(rec.get("veths", [])):
        if link and link in links:
            left.append("%s: link %s" % (name, link))
    subnet = ipaddress.ip_network(rec["subnet"]) if rec.get("subnet") else None
    reused = False  # the subnet (so the addresses) now belongs to another session's bridge
    for link in json.loads(_run("ip", "-j", "-4", "addr", "show") or "[]"):
        for a in link.get("addr_info", []):
            if subnet and ipaddress.ip_address(a["local"]) in subnet:
                if link["ifname"] == rec.get("bridge"):
                    left.append("%s: host address %s on %s" % (name, a["local"], link["ifname"]))
                else:
                    reused = True
    # Rules naming only an address are this session's unless another session has its subnet now.
    tokens = _tokens(rec, addresses=not reused)
    port = rec.get("published_port")
    chains = {tuple(c) for c in rec.get("chains", [])}
    for table, lines in iptables_rules().items():
        for line in lines:
            chain = line[1:].split()[0] if line.startswith(":") else line.split()[1]
            if (table, chain) in chains:
                left.append("%s: iptables -t %s chain %s" % (name, table, chain))
            elif line.startswith("-A ") and (
                    _mentions(line, tokens) or "session %s isolation" % name in line
                    or (port and re.search(r"--dports? (\S+,)?%d\b" % port, line))):
                left.append("%s: iptables -t %s rule %s" % (name, table, line))
    for pid, starttime in rec.get("pids", []):
        if starttime is not None and _proc_starttime(pid) == starttime:
            left.append("%s: process %d (still running)" % (name, pid))
    tags = [("%s=%s" % (OWNER_ENV, rec["state_dir"])).encode()]
    if rec.get("session_id"):
        tags.append(("BACKENDAI_SESSION_ID=%s" % rec["session_id"]).encode())
    for pid in _tagged_processes(tags):
        left.append("%s: process %d (environment of the session)" % (name, pid))
    return sorted(set(left))


def main(argv: t.List[str]) -> int:
    if len(argv) >= 3 and argv[0] == "record":
        json.dump([record(argv[1], n) for n in argv[2:]], sys.stdout)
        return 0
    if argv == ["check"]:
        json.dump([item for rec in json.load(sys.stdin) for item in check(rec)], sys.stdout)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
