# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What local agents and their multi-node sessions leave on this machine, observed from outside.

    leftovers.py snapshot FILE                   (create) namespaces, links, VXLAN devices, iptables rules now
    leftovers.py record SESSIONS_ROOT AGENTS_ROOT (before destroy) JSON: what the sessions and agents made
    leftovers.py check FILE < RECORD             (after destroy) JSON list of what is still there

``record`` reads the state directories (each session's journal and session.json, each set of agents'
journal and CNI config dirs); ``check`` looks for every recorded namespace, state directory, CNI
config and process again, for VXLAN devices, bridges and links on this machine that the snapshot
did not have, and for iptables rules naming a session's bridge or subnet (the whole ruleset must
equal the snapshot's when no other session of this collection is on the machine). Stdlib only;
needs root.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import typing as t

NETNS_DIR = "/run/netns"
OWNER_ENV = b"BACKENDAI_CLUSTER_LOCAL_OWNER="  # the runtime tags the processes it starts with the state dir
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TABLES = ("filter", "nat")


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env={"PATH": PATH}).stdout


def _json(path: str) -> t.Any:
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
    return out


def netns() -> t.List[str]:
    return sorted(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else []


def links() -> t.Dict[str, str]:
    """Name -> kind of every link in this (the host's) namespace."""
    data = json.loads(_run("ip", "-d", "-j", "link", "show") or "[]")
    return {link["ifname"]: (link.get("linkinfo") or {}).get("info_kind", "") for link in data}


def iptables() -> t.Dict[str, t.List[str]]:
    out = {}
    for table in TABLES:
        out[table] = sorted(re.sub(r"\[\d+:\d+\]", "", line) for line in _run("iptables-save", "-t", table).splitlines()
                            if line.startswith((":", "-A")))
    return out


def snapshot() -> t.Dict[str, t.Any]:
    return {"netns": netns(), "links": links(), "iptables": iptables()}


def record(sessions_root: str, agents_root: str) -> t.Dict[str, t.Any]:
    made: t.Dict[str, t.Any] = {"netns": [], "dirs": [], "marks": [], "conflists": [], "owners": [], "names": []}
    for d in sorted(glob.glob(os.path.join(sessions_root, "*"))):
        if not os.path.isdir(d):
            continue
        made["dirs"].append(d)
        made["owners"].append(d)
        made["names"].append(os.path.basename(d))
        for e in _journal(os.path.join(d, "journal")):
            if e.get("op") == "begin":
                made["netns"] += e.get("netns", [])
                made["marks"] += [e.get("bridge", ""), e.get("network", "")]
            if e.get("op") == "overlay":
                made["conflists"].append(e["conflist"])
                made["marks"] += [e["bridge"], e["vxlan"]]
        info = _json(os.path.join(d, "session.json")) or {}
        if info.get("subnet"):
            made["marks"].append(info["subnet"].rsplit(".", 1)[0] + ".")
    for d in sorted(glob.glob(os.path.join(agents_root, "*"))):
        if not os.path.isdir(d):
            continue
        made["dirs"].append(d)
        made["names"].append("agents " + os.path.basename(d))
        for e in _journal(os.path.join(d, "journal")):
            if e.get("op") == "netns":
                made["netns"] += e.get("names", [])
        made["conflists"] += glob.glob(os.path.join(d, "cni", "*", "*.conflist"))
    made["marks"] = sorted({m for m in made["marks"] if m})
    made["summary"] = ", ".join(made["names"]) or "anything (nothing was there)"
    return made


def _processes(owners: t.Sequence[str], roots: t.Sequence[str]) -> t.List[str]:
    found = []
    tags = [OWNER_ENV + o.encode() for o in owners]
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(tag in env for tag in tags) or any(r and r in cmd for r in roots):
            found.append("process %s: %s" % (pid, cmd.strip()[:120]))
    return found


def check(baseline: t.Optional[t.Mapping[str, t.Any]], made: t.Mapping[str, t.Any]) -> t.List[str]:
    left = []
    now_netns = set(netns())
    left += ["network namespace %s" % n for n in made["netns"] if n in now_netns]
    left += ["state directory %s" % d for d in made["dirs"] if os.path.exists(d)]
    left += ["CNI config %s" % c for c in made["conflists"] if os.path.exists(c)]
    left += _processes(made["owners"], made["dirs"])
    now_links = links()
    left += ["link %s" % n for n in now_links if n in made["marks"]]
    rules = iptables()
    for table, lines in rules.items():
        left += ["iptables -t %s: %s" % (table, line) for line in lines for m in made["marks"] if m in line]
    if baseline:
        before = baseline["links"]
        left += ["%s device %s" % (kind, n) for n, kind in now_links.items()
                 if kind in ("vxlan", "bridge", "veth") and n not in before and n.startswith(("bai", "bov", "bvx"))]
        quiet = not [n for n in now_netns if n.startswith("bai")] and not [n for n in before if n.startswith("bai")]
        if quiet:  # no other session of this collection on the machine: the whole ruleset is as before
            for table in TABLES:
                changed = sorted(set(rules[table]) ^ set(baseline["iptables"][table]))
                left += ["iptables -t %s changed: %s" % (table, line) for line in changed]
    return left


def main(argv: t.List[str]) -> int:
    if len(argv) == 3 and argv[1] == "snapshot":
        os.makedirs(os.path.dirname(argv[2]), exist_ok=True)
        with open(argv[2], "w", encoding="utf-8") as f:
            json.dump(snapshot(), f)
    elif len(argv) == 4 and argv[1] == "record":
        print(json.dumps(record(argv[2], argv[3])))
    elif len(argv) == 3 and argv[1] == "check":
        print(json.dumps(check(_json(argv[2]), json.load(sys.stdin))))
    else:
        sys.stderr.write(__doc__ or "")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
