# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The restart_all barrier of the supervisors (``_session.gang.GANG_SCRIPT``), run whole by busybox sh as in the
runtime bundle, N supervisors on this machine with a stand-in network, and every probe counted.

Each member is the real script (only its paths moved under the test's directory) with its command; ``nc`` is a
stand-in: ``nc -ll ... -e HANDLER`` registers the member's handler, and ``nc -w 1 ADDR PORT`` runs the handler of
the member at ADDR at once with the line, logs ``caller target kind`` with the caller's published generation and
state, or refuses when the pair is cut (a split network) or the target does not listen. The real network path runs in
tests/local_runtime/test_failure_policy*.py.

What is checked: while a member waits in the barrier (state ``starting`` or ``waiting``) it asks only the gang's
coordinator (its first member), and the coordinator asks each member: at most 2(N-1) (asker, asked) pairs, where every
member asking every other made N(N-1) (the barrier before this change: 56 pairs at N = 8). A split network makes
neither half run its command again, and both give up after rejoin_timeout; a split that heals in time starts the gang
together once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import GANG_SCRIPT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("busybox") is None, reason="needs busybox")]

FAKE_NC = r"""#!/bin/sh
me=$BACKENDAI_CLUSTER_HOST
case "$1" in -ll) echo "$5" > "$SIM/handler.$me"; exec sleep 100000;; esac
to=$3; read -r line
if grep -qx "$me $to" "$SIM/cut" || [ ! -s "$SIM/handler.$to" ]; then exit 1; fi
st=; read -r st < "$SIM/$me/run/backendai/gang/now" 2>/dev/null
echo "$me $to ${line%% *} $st" >> "$SIM/log"
read -r h < "$SIM/handler.$to"; echo "$line" | "$h"
"""
#: The bundle's sh as the generated scripts (relay, handler) name it: busybox sh with the stand-in nc (busybox runs its
#: own applets before any on PATH) and the member whose script it is (under its directory) as the caller.
FAKE_SH = r"""#!/bin/sh
s=$1; shift; h=${s#"$SIM"/}; export BACKENDAI_CLUSTER_HOST=${h%%/*}
exec busybox sh -c 'nc() { "$SIM/bin/nc" "$@"; }; . "$0"' "$s" "$@"
"""
#: The member: the entrypoint's variables, then the supervisor (sourced, as the entrypoint does).
MEMBER = r"""nc() { "$SIM/bin/nc" "$@"; }
B=$SIM/bundle L=$SIM RUN= X=sh U=root UI=$(id -u) GI=$(id -g) BOK=1
set -- sh -c 'echo "$BACKENDAI_RESTART_COUNT" >> "$SIMD/starts"; while [ ! -e "$SIMD/die" ]; do sleep 0.1; done
rm -f "$SIMD/die"; exit 1'
. "$SIMD/gang.sh"
"""


class Gang:
    def __init__(self, root: str, size: int, rejoin: int) -> None:
        self.root, self.members = root, ["main1"] + ["sub%d" % i for i in range(1, size)]
        self.procs: t.Dict[str, subprocess.Popen] = {}
        for d in ("bin", "bundle/bin"):
            os.makedirs(os.path.join(root, d))
        for path, text in (("bin/nc", FAKE_NC), ("bundle/bin/sh", FAKE_SH)):
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(os.path.join(root, path), 0o755)
        with open(os.path.join(root, "peers"), "w", encoding="utf-8") as f:  # each member's address is its name
            f.writelines("%s %s\n" % (m, m) for m in self.members)
        self.cut([])
        open(os.path.join(root, "log"), "w").close()
        self.policy = "restart_all 5 600 0 %d 2201 -" % rejoin

    def start(self) -> "Gang":
        for m in self.members:
            d = os.path.join(self.root, m)
            os.makedirs(os.path.join(d, "alloc"))
            with open(os.path.join(d, "gang.sh"), "w", encoding="utf-8") as f:
                f.write(GANG_SCRIPT.replace("/run/backendai", d + "/run/backendai"))
            env = dict(os.environ, SIM=self.root, SIMD=d, BACKENDAI_CLUSTER_HOST=m, NOMAD_ALLOC_DIR=d + "/alloc",
                       NOMAD_META_BACKENDAI_FAILURE=self.policy, NOMAD_META_BACKENDAI_GANG_MEMBERS=",".join(self.members))
            self.procs[m] = subprocess.Popen(["busybox", "sh", "-c", MEMBER], env=env, start_new_session=True,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)  # the supervisor's trap stops its command's process group
        for m, p in self.procs.items():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for pid in (self.read(m, "run/backendai/gang/pid"), str(p.pid)):
                try:
                    os.killpg(int(pid), signal.SIGKILL)  # the command's group, the listener and relays
                except (ValueError, ProcessLookupError, PermissionError):
                    pass
            p.wait(timeout=10)

    def read(self, member: str, rel: str) -> str:
        try:
            with open(os.path.join(self.root, member, rel), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return ""

    def status(self, member: str) -> t.Dict[str, str]:
        return dict((line.split(" ", 1) + [""])[:2] for line in self.read(member, "alloc/backendai/gang").splitlines())

    def starts(self, member: str) -> t.List[str]:
        return self.read(member, "starts").split()

    def until(self, ok: t.Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            assert time.monotonic() < deadline, {m: (self.status(m), self.starts(m)) for m in self.members}
            time.sleep(0.1)

    def all_running_at(self, generation: int) -> bool:
        return all(self.status(m).get("state") == "running" and self.status(m).get("generation") == str(generation)
                   and len(self.starts(m)) == generation + 1 for m in self.members)

    def cut(self, pairs: t.Iterable[t.Tuple[str, str]]) -> None:
        with open(os.path.join(self.root, "cut"), "w", encoding="utf-8") as f:
            f.writelines("%s %s\n" % p for p in pairs)

    def log(self, clear: bool = False) -> t.List[t.List[str]]:
        path = os.path.join(self.root, "log")
        with open(path, encoding="utf-8") as f:
            lines = [line.split() for line in f]
        if clear:
            open(path, "w").close()
        return lines


def barrier_probes(log: t.List[t.List[str]]) -> t.List[t.Tuple[str, str]]:
    """(asker, asked) of every probe made while the asker waited in the barrier."""
    return [(x[0], x[1]) for x in log if x[2] == "ping" and len(x) > 4 and x[4] in ("starting", "waiting")]


@pytest.fixture
def gang(tmp_path: t.Any) -> t.Any:
    made: t.List[Gang] = []

    def make(size: int, rejoin: int = 60) -> Gang:
        made.append(Gang(str(tmp_path), size, rejoin).start())
        return made[-1]
    yield make
    for g in made:
        g.stop()


def test_the_barrier_asks_the_coordinator_not_every_member(gang: t.Any) -> None:
    """N = 8: at the start and after a rank's death, every waiting member asks main1 only and main1 asks each member
    (at most 2(N-1) = 14 asker-asked pairs; every member asking every other made N(N-1) = 56)."""
    size = int(os.environ.get("GANG_BARRIER_SIZE", "8"))  # (16 for the figure in docs/failure-policy.md)
    g = gang(size)
    g.until(lambda: g.all_running_at(0), 30)
    at_start = barrier_probes(g.log(clear=True))
    open(os.path.join(g.root, "sub3", "die"), "w").close()  # sub3's command exits 1: the gang restarts
    g.until(lambda: g.all_running_at(1), 30)
    after_death = barrier_probes(g.log())
    print("barrier probes, N = %d: %d at the start, %d after a death; pairs %d and %d" % (
        size, len(at_start), len(after_death), len(set(at_start)), len(set(after_death))))
    for probes in (at_start, after_death):
        assert probes, "no barrier was seen"
        assert all("main1" in pair for pair in probes), sorted(set(probes))
        assert len(set(probes)) <= 2 * (size - 1), sorted(set(probes))


def test_a_split_network_restarts_neither_half_and_both_give_up(gang: t.Any) -> None:
    """Two halves that cannot reach each other: each sees the other gone, moves to a new generation and waits; neither
    runs its command again (the coordinator, main1, never has every member), and every member gives up after
    rejoin_timeout (the other half 3 s later: no go came from main1)."""
    g = gang(6, rejoin=4)
    g.until(lambda: g.all_running_at(0), 30)
    left, right = g.members[:3], g.members[3:]
    g.cut([(a, b) for a in left for b in right] + [(b, a) for a in left for b in right])
    g.until(lambda: all(g.status(m).get("state") in ("failed", "gave_up") for m in g.members), 30)
    assert all(g.starts(m) == ["0"] for m in g.members), {m: g.starts(m) for m in g.members}
    g.until(lambda: all(p.poll() is not None for p in g.procs.values()), 15)  # every supervisor ended
    assert {g.status(m).get("first", "").split(" ", 3)[-1].startswith("the gang did not come back together")
            for m in g.members} == {True}, {m: g.status(m) for m in g.members}


def test_a_split_that_heals_within_rejoin_timeout_starts_the_gang_together_once(gang: t.Any) -> None:
    g = gang(6, rejoin=30)
    g.until(lambda: g.all_running_at(0), 30)
    left, right = g.members[:3], g.members[3:]
    g.cut([(a, b) for a in left for b in right] + [(b, a) for a in left for b in right])
    g.until(lambda: all(g.status(m).get("state") == "waiting" for m in g.members), 20)
    assert all(g.starts(m) == ["0"] for m in g.members)
    g.cut([])
    g.until(lambda: len({g.status(m).get("generation") for m in g.members}) == 1 and all(
        g.status(m).get("state") == "running" for m in g.members), 20)
    generation = g.status("main1")["generation"]
    assert all(g.starts(m) == ["0", generation] for m in g.members), {m: g.starts(m) for m in g.members}
