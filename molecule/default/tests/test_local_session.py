# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify the session converge made: the seeds' promises, checked from inside every container.

* every seed variable in every container (ssh shell and the command's own environment) means
  what the seed tables say;
* MASTER_ADDR resolves to main1's address everywhere, and main1 is reachable on MASTER_PORT;
* every container reaches every other one with ``ssh <host>`` and no prompt, as the ``work`` user;
* only main1 is published (on 127.0.0.1), the subs only through main1.

Two sessions on one machine reaching none of each other are checked by the ``multinode`` scenario (its second
session, made by the same playbook) and by ``tests/local_runtime/test_local_runtime.py::test_sessions_are_isolated``
(both ways, with the host routing between bridges or not, and one session's ssh_config refused by the other's main1).
"""

from __future__ import annotations

import ipaddress
import json
import re
import typing as t
import uuid

from conftest import PY, Session, expected_env, hostnames


def test_the_session_has_the_containers_of_the_spec(session: Session, spec: t.Mapping[str, t.Any]) -> None:
    assert session.hosts == hostnames(spec)  # main1, sub1, ... in global order
    assert len(session.hosts) == spec["cluster_size"]
    assert spec["cluster_mode"] == "single-node"
    assert len(set(session.address.values())) == len(session.hosts)
    subnet = ipaddress.ip_network(session.info["subnet"])
    assert all(ipaddress.ip_address(a) in subnet for a in session.address.values())


def test_every_seed_variable_has_its_meaning(session: Session, spec: t.Mapping[str, t.Any],
                                             envs: t.Mapping[str, t.Mapping[str, str]], hostname: str) -> None:
    container = session.container(hostname)
    assert container.check_output("uname -n") == hostname
    want = expected_env(spec, hostname)
    for source, env in (("ssh shell", envs[hostname]), ("command", session.command_env(hostname))):
        # a login gets the session's variables, the command every variable of the task, the user's env too (as on Nomad)
        wanted = {k: v for k, v in want.items() if source == "command" or k not in (spec.get("env") or {})}
        got = {k: env.get(k) for k in wanted}
        assert got == wanted, "%s of %s" % (source, hostname)
        # SIZE, REPLICAS and HOSTS agree with each other
        replicas = dict(pair.split(":") for pair in env["BACKENDAI_CLUSTER_REPLICAS"].split(","))
        assert sum(int(n) for n in replicas.values()) == int(env["BACKENDAI_CLUSTER_SIZE"])
        assert len(env["BACKENDAI_CLUSTER_HOSTS"].split(",")) == int(env["WORLD_SIZE"])
        # TF_CONFIG: every container as host:MASTER_PORT in global order; this one is worker <rank>
        tf = json.loads(env["TF_CONFIG"])
        assert tf == {"cluster": {"worker": ["%s:%s" % (h, spec["master_port"]) for h in hostnames(spec)]},
                      "task": {"type": "worker", "index": hostnames(spec).index(hostname)}}, source
        # the two IDs, and the same ones in both places
        uuid.UUID(env["BACKENDAI_KERNEL_ID"])
        assert env["BACKENDAI_SESSION_ID"] == session.info["session_id"], source
        assert env["BACKENDAI_KERNEL_ID"] == envs[hostname]["BACKENDAI_KERNEL_ID"], source


def test_kernel_ids_are_unique_and_the_session_id_is_main1s(session: Session,
                                                            envs: t.Mapping[str, t.Mapping[str, str]]) -> None:
    kernel_ids = [envs[h]["BACKENDAI_KERNEL_ID"] for h in session.hosts]
    assert len(set(kernel_ids)) == len(kernel_ids)
    assert {envs[h]["BACKENDAI_SESSION_ID"] for h in session.hosts} == {envs["main1"]["BACKENDAI_KERNEL_ID"]}


def test_master_addr_resolves_to_main1_from_every_container(session: Session, hostname: str) -> None:
    names = ["$MASTER_ADDR"] + session.hosts
    out = session.container(hostname).check_output(
        "for h in %s; do getent ahostsv4 \"$h\" | head -n 1; done" % " ".join(names))
    own_ip = session.in_netns(hostname, "ip -4 -o addr show dev eth0").split()[3].split("/")[0]
    resolved = [line.split()[0] for line in out.splitlines()]
    assert own_ip == session.address[hostname]  # the container's own address, as the host recorded it
    assert resolved[0] == session.address["main1"]  # MASTER_ADDR
    # and every peer's name resolves to that peer's own address
    assert resolved[1:] == [session.address[h] for h in session.hosts]


def test_main1_is_reachable_on_master_port_from_every_container(session: Session,
                                                                spec: t.Mapping[str, t.Any]) -> None:
    """What torch's env:// does: every rank connects to MASTER_ADDR:MASTER_PORT, where main1 listens."""
    subs = session.hosts[1:]
    server = (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', %d)); s.listen(16); s.settimeout(20)\n"
        "for _ in range(%d):\n"
        "    c, _a = s.accept(); c.sendall(socket.gethostname().encode()); c.close()\n" % (spec["master_port"], len(subs)))
    main1 = session.container("main1")
    main1.check_output("nohup %s -c %s >/dev/null 2>&1 </dev/null &", PY, server)
    client = (
        "import os, socket, time\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        s = socket.create_connection((os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])), 2); break\n"
        "    except ConnectionRefusedError:\n"
        "        time.sleep(0.05)\n"
        "print(s.recv(64).decode())\n")
    answers = session.on_each(lambda sub: session.container(sub).check_output("%s -c %s", PY, client), subs)
    assert answers == dict.fromkeys(subs, "main1")


def test_ssh_from_every_container_to_every_other_without_prompt(session: Session, hostname: str) -> None:
    others = [h for h in session.hosts if h != hostname]
    loop = ("for h in %s; do ssh -o BatchMode=yes -o ConnectTimeout=5 \"$h\" "
            "'echo \"$(uname -n) $BACKENDAI_CLUSTER_HOST\"' </dev/null || echo \"$h FAILED\" & done; wait" % " ".join(others))
    result = session.container(hostname).run(loop)
    assert result.rc == 0 and result.stderr == "", result.stderr  # no prompt, no warning
    assert sorted(result.stdout.splitlines()) == ["%s %s" % (h, h) for h in others]


def test_logins_and_the_command_are_the_work_user_not_root(session: Session, hostname: str) -> None:
    container = session.container(hostname)
    assert container.check_output("id -un; id -u; echo $HOME").split() == ["work", "1000", "/home/work"]
    assert session.command_env(hostname)["HOME"] == "/home/work"  # the command ran as work too (its env says so)
    # (ssh's own 255 would end the outer ssh that testinfra runs this through with 255, which testinfra takes for a
    # failed connection: the exit status is printed instead)
    refused = container.run("ssh -o BatchMode=yes -l root %s true; echo rc=$?", hostname)
    assert refused.stdout.split() == ["rc=255"] and "Permission denied" in refused.stderr, refused.stderr


def _dnat_rules(host: t.Any) -> t.List[str]:
    return [line for line in host.check_output("iptables-save -t nat").splitlines() if "--to-destination" in line]


def test_only_main1_is_published(host: t.Any, session: Session, spec: t.Mapping[str, t.Any]) -> None:
    published = {c["hostname"]: c["published"] for c in session.info["containers"]}
    assert {h for h, p in published.items() if p} == {"main1"}
    addr, port = published["main1"].rsplit(":", 1)
    assert addr == "127.0.0.1" and session.info["published"] == published["main1"]
    # the host's DNAT rules: the only one leading into this session is 127.0.0.1:<port> -> main1:<ssh port>
    ours = [line for line in _dnat_rules(host)
            if re.search(r"--to-destination (%s):" % "|".join(map(re.escape, session.address.values())), line)]
    assert len(ours) == 1, ours
    assert "--to-destination %s:%d" % (session.address["main1"], spec["ssh"]["port"]) in ours[0]
    assert "-d 127.0.0.1/32" in ours[0] and "--dport %s" % port in ours[0]
    # nothing of the session listens in the host's network namespace: sshd runs only in the containers
    pids = {c["pid"] for c in session.info["containers"]}
    listeners = host.check_output("ss -Hltnp")
    assert not [p for p in pids if "pid=%d," % p in listeners]
    inside = session.on_each(lambda h: session.in_netns(h, "ss -Hltn"))
    assert all("0.0.0.0:%d" % spec["ssh"]["port"] in listening for listening in inside.values())
    # the published port is main1's sshd, and the user's ssh_config reaches the subs through main1 only
    assert host.check_output("ssh -F %s -o BatchMode=yes main1 uname -n", session.ssh_config) == "main1"
    config = open(session.ssh_config, encoding="utf-8").read()
    assert re.findall(r"HostName (\S+)", config) == ["127.0.0.1"]
    assert "ProxyJump main1" in config
