# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisors' broadcast tree (``_session.gang.RELAY_SCRIPT``), run by the shells it runs under (busybox sh, as
in the runtime bundle, and the system's sh) with a stand-in ``nc``: each member's relay script is the one its
supervisor writes, a connection to a member runs that member's handler part (the relay) at once, and a member listed
as dead refuses connections. Every member hears a message once, the teller makes FANOUT connections, not N-1, and a
dead member's subtree still hears it. The real network path runs in tests/local_runtime/test_failure_policy*.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import FANOUT, RELAY_SCRIPT

SHELLS = [s for s in (["busybox", "sh"], ["sh"]) if shutil.which(s[0])]
FAKE_NC = r"""#!/bin/sh
# nc -w 1 ADDR PORT: a member's handler, at once (the relay part), or a refusal from a dead member
addr=$3; read -r line
grep -qx "$addr" "$D/dead" && exit 1
host=$(awk -v a="$addr" '$1==a{print $2}' "$D/peers")
echo "$ME $host $line" >> "$D/log"
case "$line" in relay\ *) o=${line#relay }; m=${o#* }; o=${o%% *}; $RELAY_SHELL "$D/relay.$host" "$o" "$m";; esac
"""


def broadcast(tmp: str, shell: t.List[str], members: t.List[str], origin: str, dead: t.Sequence[str] = ()
              ) -> t.List[t.Tuple[str, str, str]]:
    """(sender, receiver, line) of every connection made while ``origin`` tells ``note 0 x``."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "nc"), "w", encoding="utf-8") as f:
        f.write(FAKE_NC)
    os.chmod(os.path.join(bindir, "nc"), 0o755)
    addrs = {m: "10.0.%d.%d" % divmod(i + 2, 256) for i, m in enumerate(members)}
    with open(os.path.join(tmp, "peers"), "w", encoding="utf-8") as f:
        f.writelines("%s %s\n" % (a, m) for m, a in addrs.items())
    with open(os.path.join(tmp, "dead"), "w", encoding="utf-8") as f:
        f.writelines("%s\n" % addrs[m] for m in dead)
    for m in members:  # what each supervisor writes: its variables, then the script (ME exported for the log, and nc
        # the stand-in: a busybox shell runs its own nc applet before any on PATH)
        with open(os.path.join(tmp, "relay." + m), "w", encoding="utf-8") as f:
            f.write("MEMBERS='%s' L=%s GPORT=2201 ME=%s K=%d; export ME; nc() { %s/nc \"$@\"; }\n%s" % (
                " ".join(members), tmp, m, FANOUT, bindir, RELAY_SCRIPT))
    open(os.path.join(tmp, "log"), "w").close()
    env = dict(os.environ, D=tmp, RELAY_SHELL=" ".join(shell))
    subprocess.run(shell + [os.path.join(tmp, "relay." + origin), origin, "note 0 x"], env=env, check=True,
                   timeout=60)
    with open(os.path.join(tmp, "log"), encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split(" ", 2)) for line in f]  # type: ignore[misc]


@pytest.mark.parametrize("shell", SHELLS, ids=[s[0] for s in SHELLS])
@pytest.mark.parametrize("size", [2, 8, 21])
def test_every_member_hears_it_once_and_the_teller_makes_fanout_connections(tmp_path: t.Any, shell: t.List[str],
                                                                            size: int) -> None:
    members = ["main1"] + ["sub%d" % i for i in range(1, size)]
    origin = members[min(3, size - 1)]
    sent = broadcast(str(tmp_path), shell, members, origin)
    assert sorted(r for _, r, _ in sent) == sorted(m for m in members if m != origin)
    assert {line for _, _, line in sent} == {"relay %s note 0 x" % origin}
    assert sum(1 for s, _, _ in sent if s == origin) == min(FANOUT, size - 1)
    assert max(sum(1 for s, _, _ in sent if s == m) for m in members) <= FANOUT


@pytest.mark.parametrize("shell", SHELLS, ids=[s[0] for s in SHELLS])
def test_a_dead_member_does_not_cut_off_its_subtree(tmp_path: t.Any, shell: t.List[str]) -> None:
    members = ["main1"] + ["sub%d" % i for i in range(1, 21)]
    # main1 tells; sub1 (rank 1) is dead: its children (ranks 5-8: sub5..sub8) hear it from main1 instead
    sent = broadcast(str(tmp_path), shell, members, "main1", dead=["sub1"])
    assert sorted(r for _, r, _ in sent) == sorted(m for m in members if m not in ("main1", "sub1"))
    assert {r for s, r, _ in sent if s == "main1"} == {"sub2", "sub3", "sub4", "sub5", "sub6", "sub7", "sub8"}
