# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify the multi-node session converge made on three local agents.

* the containers are spread over the agents as the seed rule says (it fits on none of them alone);
* every container's environment (ssh shell and its command's own): multi-node mode, global ranks,
  and LOCAL_RANK counting the session's containers on the same agent;
* ``ssh <host>`` works between every pair of containers, across agents, by hostname;
* the overlay: a VXLAN device on every agent flooding to the other two agents' tunnel addresses inside
  WireGuard (the agent's wireguard-go interface holds exactly the other two as peers), MTU = underlay - 80 - 70 on every
  container interface (that a full-size datagram with the DF bit crosses agents and a 20 MB transfer arrives with no
  VXLAN packet fragmented on the underlay is checked on the same kind of session by
  ``tests/local_runtime/test_local_multinode.py::test_df_bit_and_20mb_transfer_cross_agents_without_fragmentation``);
* the second session on the same agents reaches none of this one's containers, nor they its.
"""

from __future__ import annotations

import json
import os
import subprocess
import typing as t
from concurrent.futures import ThreadPoolExecutor

from conftest import Session, expected_agents, hostnames


def agent_ns(agents: t.Sequence[t.Mapping[str, t.Any]]) -> t.Dict[str, str]:
    return {a["name"]: a["local"]["netns"] for a in agents}


def test_containers_are_spread_over_the_agents(session: Session, other: Session, spec: t.Mapping[str, t.Any],
                                               agents: t.Sequence[t.Mapping[str, t.Any]], svars: t.Mapping[str, t.Any]) -> None:
    total = spec["resources"]["cpu"] * spec["cluster_size"]
    assert all(a["cpu"] < total for a in agents), "the session must not fit on one agent"
    assert session.hosts == hostnames(spec)
    assert [session.agent[h] for h in session.hosts] == expected_agents(spec, agents)
    assert len(set(session.agent.values())) == 3
    assert sorted(other.agent.values()) == sorted(a["name"] for a in agents)  # one container per agent
    assert session.info["vxlan"] and other.info["vxlan"] and session.info["vxlan"] != other.info["vxlan"]


def test_environment_of_every_container(session: Session, spec: t.Mapping[str, t.Any], hostname: str) -> None:
    hosts = hostnames(spec)
    rank = hosts.index(hostname)
    on_same_agent = [h for h in hosts if session.agent[h] == session.agent[hostname]]
    want = {
        "BACKENDAI_CLUSTER_HOST": hostname,
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_MODE": "multi-node",       # the containers span agents
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
        "BACKENDAI_CLUSTER_ROLE": "main" if rank == 0 else "sub",
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),    # zero-based global index
        "WORLD_SIZE": str(len(hosts)),
        "WORLD_RANK": str(rank),
        "RANK": str(rank),
        "LOCAL_RANK": str(on_same_agent.index(hostname)),  # among the session's containers on this agent
        "MASTER_ADDR": "main1",
        "MASTER_PORT": str(spec["master_port"]),
        "PROJECT": "molecule",
    }
    container = session.container(hostname)
    assert container.check_output("uname -n") == hostname
    for source, env in (("ssh shell", container.environment()), ("command", session.command_env(hostname))):
        # a login gets the session's variables, the command every variable of the task, the user's env too (as on Nomad)
        wanted = {k: v for k, v in want.items() if source == "command" or k != "PROJECT"}
        assert {k: env.get(k) for k in wanted} == wanted, source
        tf = json.loads(env["TF_CONFIG"])
        assert tf["task"] == {"type": "worker", "index": rank} and len(tf["cluster"]["worker"]) == len(hosts)


def test_ssh_between_every_pair_of_containers_across_agents(session: Session) -> None:
    hosts = " ".join(session.hosts)
    # every container logs into every container at once (one at a time, the 36 logins took 11 s), each answer in a
    # file of its own, printed in the order of the hosts
    loop = ("for h in %s; do ssh $h hostname > /tmp/pair.$h 2> /tmp/pair.$h.err & done; wait; "
            "for h in %s; do cat /tmp/pair.$h; cat /tmp/pair.$h.err >&2; done" % (hosts, hosts))
    # stdout (the hostnames) and stderr are kept apart: the image's login profile (/etc/profile.d) may write
    # to stderr in every ssh shell; it is shown on failure.
    p = session.ssh("main1", "for s in %s; do ssh $s '%s' > /tmp/pairs.$s 2> /tmp/pairs.$s.err & done; wait; "
                             "for s in %s; do echo $s: $(cat /tmp/pairs.$s); done; cat /tmp/pairs.*.err >&2"
                    % (hosts, loop, hosts))
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == ["%s: %s" % (h, hosts) for h in session.hosts], p.stderr.decode()


def test_overlay_on_every_agent(session: Session, agents: t.Sequence[t.Mapping[str, t.Any]]) -> None:
    underlay = {a["name"]: a["local"]["underlay_ip"] for a in agents}
    mtu = agents[0]["local"]["underlay_mtu"] - 80 - 70  # WireGuard over IPv6 80, VXLAN over IPv6 70
    assert session.info["underlay_encryption"] == "wireguard"
    for name, ns in agent_ns(agents).items():
        (vx,) = json.loads(subprocess.run(["ip", "-n", ns, "-d", "-j", "link", "show", session.info["vxlan"]],
                                          capture_output=True, text=True, check=True).stdout)
        assert vx["mtu"] == mtu and "local6" in vx["linkinfo"]["info_data"]  # between tunnel addresses
        wg = session.info["agents"][name]["wireguard"]
        endpoints = subprocess.run(["ip", "netns", "exec", ns, "wg", "show", wg, "endpoints"], capture_output=True,
                                   text=True, check=True).stdout.split()
        assert sorted(e.rpartition(":")[0] for e in endpoints[1::2]) == sorted(
            ip for a, ip in underlay.items() if a != name)
        fdb = json.loads(subprocess.run(["bridge", "-n", ns, "-j", "fdb", "show", "dev", session.info["vxlan"]],
                                        capture_output=True, text=True, check=True).stdout)
        flood = sorted(e["dst"] for e in fdb if e["mac"] == "00:00:00:00:00:00")
        assert len(flood) == len(underlay) - 1 and all(d.startswith("fd") for d in flood), flood
        assert [f for f in os.listdir(a_conf(agents, name)) if f.endswith(".conflist")], "no CNI config on " + name
    for hostname in session.hosts:
        line = session.in_netns(hostname, "ip -o link show eth0")
        assert " mtu %d " % mtu in line, (hostname, line)


def a_conf(agents: t.Sequence[t.Mapping[str, t.Any]], name: str) -> str:
    return next(a["local"]["cni_config_dir"] for a in agents if a["name"] == name)


def test_the_other_session_is_unreachable(session: Session, other: Session, spec: t.Mapping[str, t.Any]) -> None:
    port = spec["ssh"]["port"]
    mine, theirs = list(session.address.values()), list(other.address.values())
    assert all(other.reachable("main1", [other.address[h] for h in other.hosts[1:]], port).values()), \
        "the second session works across agents"
    # the crossings all at once: each takes the probe's whole second (a dropped SYN is never answered)
    crossings = [(session, src, theirs, "%s reached the other session" % src)
                 for src in (session.hosts[0], session.hosts[-1])]
    crossings += [(other, src, mine, "the other session's %s reached this one" % src) for src in other.hosts]
    with ThreadPoolExecutor(len(crossings)) as pool:
        reached = list(pool.map(lambda c: c[0].reachable(c[1], c[2], port), crossings))
    for (_s, _src, _targets, message), probe in zip(crossings, reached):
        assert not any(probe.values()), message
