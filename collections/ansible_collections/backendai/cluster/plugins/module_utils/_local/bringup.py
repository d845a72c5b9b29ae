# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bringing a local session up: its files, namespaces, network and containers, every step journaled.

``bring_up`` is called by ``_local.runtime`` with the session's directory locked and a journal
open; when it raises, the runtime replays the journal backwards (``_local.teardown``).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import threading
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local import agent_network as _local_network
from ansible_collections.backendai.cluster.plugins.module_utils._local import exec_channel
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import (
    ENGINE_CIDFILE,
    ENGINE_DIR,
    inspect_containers,
    mhz_per_core,
    podman,
    write_conf,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import (
    add_netns,
    is_alive,
    link_exists,
    proc_stat,
    netns_path,
    socket_in_netns,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.publish import start_relay
from ansible_collections.backendai.cluster.plugins.module_utils._local.recreate import save_run
from ansible_collections.backendai.cluster.plugins.module_utils._local.ssh_access import (
    STATE_KEY_FILES,
    free_local_port,
    key_files,
    user_ssh_config,
    wait_for_ssh,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import (
    PIDS_LIMIT,
    EngineRun,
    run_args,
    task_env,
    task_files,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.run import run
from ansible_collections.backendai.cluster.plugins.module_utils._local.session import LocalSession, resource_names
from ansible_collections.backendai.cluster.plugins.module_utils._files import create_file, write_file
from ansible_collections.backendai.cluster.plugins.module_utils._session.hosts import hosts_text, peers_text
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    Journal,
    LocalRuntimeError,
    SessionPaths,
    read_text,
    tail_lines,
)


#: The session hosts file's own lines; the peers block follows (``_session.hosts.hosts_text``).
BASE_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _host_networks() -> t.List[ipaddress.IPv4Network]:
    proc = run(["ip", "-j", "-4", "addr", "show"], check=False)
    nets = []
    with contextlib.suppress(ValueError):
        for link in json.loads(proc.stdout or b"[]"):
            for a in link.get("addr_info", []):
                net = ipaddress.IPv4Interface("%s/%s" % (a["local"], a["prefixlen"])).network
                if not net.is_loopback:
                    nets.append(net)
    return nets


def bring_up(session: LocalSession, paths: SessionPaths, journal: Journal, engine: EngineRun) -> t.Dict[str, t.Any]:
    """The session's containers are engine containers of its images, started as the job's tasks (``_local.task_start``)."""
    t0 = time.monotonic()
    names = resource_names(paths, session)
    hosts = session.hostnames
    netns = [names["netns"][h] for h in hosts]
    targets = [m.target for m in session.mounts]
    journal.record("begin", name=session.name, session_id=session.session_id, bridge=names["bridge"],
                   netns=netns, hosts=hosts, targets=targets)
    # Never journal (hence never undo) something that is not ours.
    if link_exists(names["bridge"]):
        raise LocalRuntimeError("bridge %s already exists (left over by another session?)" % names["bridge"])
    taken = [n for n in netns if os.path.exists(netns_path(n))]
    if taken:
        raise LocalRuntimeError("network namespace %s already exists (left over by another session?)"
                                % ", ".join(taken))
    return _engine_bring_up(session, paths, journal, engine, names, t0)


def _record_ready(session: LocalSession, paths: SessionPaths, journal: Journal, names: t.Dict[str, t.Any],
                  network: t.Dict[str, t.Any], containers: t.List[t.Dict[str, t.Any]], published_main: bool,
                  runtime: t.Dict[str, t.Any], timings: t.Tuple[float, float, float]) -> t.Dict[str, t.Any]:
    """The session record (``session.json``) of a session whose containers all answered, written durably, then the
    start mark the batch commands wait for; the same for both kinds of container (``runtime``: what only one has)."""
    t_net, t_ready, t0 = timings
    info = dict({
        "name": session.name, "session_id": session.session_id, "state_dir": paths.root,
        "bridge": names["bridge"], "subnet": network["subnet"], "vni": network["vni"],
        "ssh_port": session.ssh_port, "user": session.user.name,
        "ssh_config": paths.user_ssh_config if published_main else None,
        "published": containers[0]["published"], "containers": containers,
        "agents": {a: dict({"netns": v["netns"], "underlay_ip": v["underlay_ip"]}, **(
            {"wireguard": _local_network.wireguard_interface(v["state_dir"], a)}
            if network["underlay_encryption"] == "wireguard" else {})) for a, v in session.agents.items()},
        "vxlan": names["vxlan"] if network["spans"] else None,
        "underlay_encryption": network["underlay_encryption"],
        "created_at": time.time(),
        "timings": {"network": round(t_net, 3), "containers_ready": round(t_ready, 3),
                    "total": round(time.monotonic() - t0, 3)},
    }, **runtime)
    write_file(paths.session_json, json.dumps(info, indent=1), mode=0o644, durable=True)
    journal.record("ready")
    return dict(public_info(info), changed=True, state="RUNNING")


def _network_up(session: LocalSession, paths: SessionPaths, names: t.Dict[str, t.Any],
                published: t.Dict[str, t.Tuple[str, int]], journal: Journal,
                meanwhile: t.Optional[t.Callable[[], None]] = None,
                ) -> t.Tuple[t.Dict[str, str], t.Dict[str, t.Any], float]:
    """The containers' network namespaces and the session network (the same for both kinds of container): the
    addresses, the network's parameters and how long the network took. main1 is published by portmap on this
    machine, by a relay behind local agents. ``meanwhile`` is called once the namespaces exist, before the session
    network is made (the engine starts its containers then)."""
    netns = [names["netns"][h] for h in session.hostnames]
    journal.record("netns", names=netns)
    add_netns(netns, owner=paths.root)
    if meanwhile is not None:
        meanwhile()
    t_net = time.monotonic()
    mappings = {h: [{"hostPort": addr[1], "containerPort": session.ssh_port, "protocol": "tcp", "hostIP": addr[0]}]
                for h, addr in published.items()} if not session.agents else {}
    addresses, network = _local_network.bring_up(session, paths, names, mappings,
                                                 [] if session.agents else _host_networks(), journal)
    return addresses, network, time.monotonic() - t_net


#: How many ``podman run`` of a session's containers run at once, per core of this machine (``_EngineStarts``).
ENGINE_STARTS_PER_CORE = 3
#: The exit codes of the job's entrypoint when it cannot start the task (``_nomad.job.ENTRYPOINT``'s ``fail``: 77 not
#: started as root, 78 the image lacks what it needs), as ``podman inspect`` shows them.
ENTRYPOINT_REFUSED = ("77", "78")
#: The file in a container's directory that ``podman run --pidfile`` writes the container's first process into.
ENGINE_PIDFILE = "pid"
#: The nameserver of a container without egress (``_engine_bring_up``): its own loopback, where none answers.
NO_EGRESS_NAMESERVER = "127.0.0.1"
#: How long after a refused connection an engine container's sshd is tried again (s): the wait runs beside the
#: containers' start, and a probe of each of 64 starting containers every 10 ms took CPU from them.
ENGINE_PROBE_INTERVAL = 0.05


def _engine_bring_up(session: LocalSession, paths: SessionPaths, journal: Journal, engine: EngineRun,
                     names: t.Dict[str, t.Any], t0: float) -> t.Dict[str, t.Any]:
    """The session's namespaces and network, and one podman container per task group of the session's job,
    started into its namespace (``_local.task_start``).

    The containers start as soon as their namespaces exist, while the CNI plugin attaches them (what a Nomad client
    does too: the task starts once its network is set up, and its peers template renders as the other groups register):
    each starts with the templates rendered with the peers known then (none), and the peers file is rendered again,
    whole, once every container has its address; the entrypoint waits for it (as it waits on Nomad) and writes
    ``/etc/hosts`` from it. Starting them after the network made a session wait for its N ADDs, then for its N
    ``podman run``; the two now overlap (the ADDs wait on the ``iptables`` lock, ``podman run`` on podman's)."""
    hosts = session.hostnames
    conf = write_conf(os.path.join(paths.state_root, ENGINE_DIR))
    for d in (paths.logs_dir, paths.cni_dir, paths.ssh_dir):
        os.makedirs(d, mode=0o700, exist_ok=True)
    keys = key_files(session.keys.private_key, session.keys.public_key)
    for n in STATE_KEY_FILES:
        create_file(os.path.join(paths.ssh_dir, n), keys[n][0], mode=keys[n][1])
    published = {c.hostname: ("127.0.0.1", free_local_port()) for c in session.containers if c.publish}
    main = hosts[0]

    job = engine.job
    secret = dict(zip(engine.task.key_items, (session.keys.private_key, session.keys.public_key + "\n")))
    host_volumes = {engine.task.runtime_volume: engine.task.runtime_dir}
    for group in job["TaskGroups"]:  # the spec's mounts: each group volume's host path, by its mount target
        by_target = {m.target: m.source for m in session.mounts}
        mounts = group["Tasks"][0].get("VolumeMounts") or []
        for m in mounts:
            if m["Destination"] in by_target:
                host_volumes[group["Volumes"][m["Volume"]]["Source"]] = by_target[m["Destination"]]
    core_mhz = mhz_per_core()
    containers = {h: "bai-%s-%s" % (names["digest"], h) for h in hosts}
    images = {g["Name"]: g["Tasks"][0]["Config"]["image"] for g in job["TaskGroups"]}
    envs = {g["Name"]: task_env(job, g) for g in job["TaskGroups"]}
    groups = {g["Name"]: g for g in job["TaskGroups"]}
    pidfiles = {h: os.path.join(paths.container_dir(h), ENGINE_PIDFILE) for h in hosts}
    cidfiles = {h: os.path.join(paths.container_dir(h), ENGINE_CIDFILE) for h in hosts}
    runs: t.Dict[str, t.Tuple[t.List[str], str, str]] = {}
    # The sessions of this machine's own agent have no egress (_local.agent_network: no ip_forward), so the machine's
    # nameserver, which podman would give them, is out of their reach: every lookup of a name not in /etc/hosts
    # (reverse ones included: torch's c10d store resolves each client's IPv4-mapped address) sent packets that go
    # nowhere and failed only after the resolver's timeouts (10 s: 2 tries of 5 s). A nameserver on the container's
    # own loopback refuses at once. (Behind local agents, and on Nomad, the agent routes the container's lookups.)
    dns = [] if session.agents else ["--dns", NO_EGRESS_NAMESERVER]
    for host, group in groups.items():  # every container's podman run, made before any starts (errors name the task)
        task_files(group, envs[host], secret, "")
        cdir = paths.container_dir(host)
        args = run_args(job, host, name=containers[host], netns_path=netns_path(names["netns"][host]),
                        task_dir=os.path.join(cdir, "task"), alloc_dir=os.path.join(cdir, "alloc"),
                        hosts_file=os.path.join(cdir, "hosts"), host_volumes=host_volumes, core_mhz=core_mhz,
                        extra=["--label", "backendai-cluster.session=" + paths.root, "--pidfile", pidfiles[host],
                               "--cidfile", cidfiles[host],
                               "--log-driver", "k8s-file", "--log-opt", "path=" + paths.log(host)]
                        + dns + exec_channel.volume_args(cdir))
        runs[host] = (["run", "--detach"] + args, cdir, "podman run of container %s (image %s)" % (host, images[host]))
    # A container's files are written by its start, just before its podman run, with the peers known then (none until
    # the network is up: then they are rendered again, whole, for the containers whose files were written before).
    peers: t.List[str] = []
    written: t.Set[str] = set()
    files_lock = threading.Lock()

    def container_files(host: str) -> None:
        with files_lock:
            cdir = paths.container_dir(host)
            for rel, (text, mode) in task_files(groups[host], envs[host], secret, "".join(peers)).items():
                path = os.path.join(cdir, "task", rel)
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                create_file(path, text, mode=mode)
            for sub in ("task/local", "task/secrets", "alloc"):
                os.makedirs(os.path.join(cdir, sub), mode=0o700, exist_ok=True)
            # the peers block stays empty until the entrypoint writes it from the peers file (the docker driver's hosts
            # file has no peers either)
            create_file(os.path.join(cdir, "hosts"), hosts_text(BASE_HOSTS, {}), mode=0o644)
            save_run(cdir, runs[host][0])  # for a container removed under the session (_local.recreate)
            written.add(host)

    t_ready = time.monotonic()
    starts = _EngineStarts(paths, conf, runs, pidfiles, {c.hostname for c in session.containers if c.command},
                           container_files)

    def start() -> None:  # once the namespaces exist
        journal.record("engine", containers=list(containers.values()), conf=conf, cidfiles=list(cidfiles.values()))
        starts.submit()

    try:
        addresses, network, t_net = _network_up(session, paths, names, published, journal, start)
        if main in published:
            write_file(paths.user_ssh_config, user_ssh_config(paths, main, hosts[1:], published[main],
                                                              session.ssh_port, session.user.name), mode=0o644)
        with files_lock:  # what nomadService renders once every task registered
            peers.append(peers_text({h: addresses[h] for h in hosts}))
            for host in written:  # the templates that change with the peers, rendered again (replaced whole)
                before = task_files(groups[host], envs[host], secret, "")
                for rel, (text, mode) in task_files(groups[host], envs[host], secret, peers[0]).items():
                    if before[rel][0] != text:
                        write_file(os.path.join(paths.container_dir(host), "task", rel), text, mode=mode)
        _await_sshd(session, paths, names, addresses, published, journal, 30.0 + 0.5 * len(runs), starts.check,
                    started=starts.pids.__contains__, retry_interval=ENGINE_PROBE_INTERVAL)
        pids = starts.wait()
    finally:
        starts.close()
    t_ready = time.monotonic() - t_ready

    records = []
    for c in session.containers:
        host = c.hostname
        records.append({
            "hostname": host, "role": c.role, "idx": c.idx, "agent": c.agent, "netns": names["netns"][host],
            "address": addresses[host], "pid": pids[host] or None, "pid_starttime": _starttime(pids[host]),
            "engine": containers[host],
            "image": images[host], "has_command": bool(c.command), "log": paths.log(host),
            "resources": {"cpu": c.resources.cpu, "memory": c.resources.memory},
            "published": "%s:%d" % published[host] if host in published else None,
        })
    return _record_ready(session, paths, journal, names, network, records, main in published, {
        "engine": {"name": "podman", "conf": conf},
        "isolation": {"engine": "podman", "memory_swap": "none", "pids_limit": PIDS_LIMIT,
                      "cpu_mhz_per_core": round(core_mhz, 1)}}, (t_net, t_ready, t0))


class _EngineStarts:
    """The ``podman run`` of a session's containers (``runs``: host -> podman arguments, working directory, what to name
    in an error), :data:`ENGINE_STARTS_PER_CORE` per core at a time, each after ``prepare(host)`` (its files): each
    waits for its container's start, so N in a row took N times as long, and N at once (64 on this 2-core machine) took
    more CPU per run (podman's processes contending: ~0.16 s against ~0.12 s) and starved the creator's own thread of
    the interpreter (the session network's ADDs began 1.3 s late).

    While the session waits for the containers' sshd, :meth:`check` fails the start at once when a ``podman run``
    failed or a container ended (with the container's log tail), but for a batch container whose command ended (the
    entrypoint runs it after starting sshd, as a Nomad task may complete before its peers started): that one is done.
    What a container's first process is comes from its ``--pidfile``, read once its ``podman run`` returned, so the
    check is a read of ``/proc``, not a podman call (one ``podman inspect`` every 50 ms took a core of this 2-core
    machine from the starting containers). Podman pulls an image it does not have, as Nomad's driver does: where no
    registry is reachable, only local images run, and the failure names the image."""

    def __init__(self, paths: SessionPaths, conf: str, runs: t.Dict[str, t.Tuple[t.List[str], str, str]],
                 pidfiles: t.Dict[str, str], batch: t.Set[str], prepare: t.Callable[[str], None]) -> None:
        self.paths, self.conf, self.runs, self.pidfiles, self.batch = paths, conf, runs, pidfiles, batch
        self.prepare = prepare
        self.pids: t.Dict[str, int] = {}
        self.done: t.Set[str] = set()
        self.started: t.Dict[str, "concurrent.futures.Future[t.Any]"] = {}
        workers = max(1, min(len(runs), ENGINE_STARTS_PER_CORE * (os.cpu_count() or 1)))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)

    def _start(self, host: str) -> "subprocess.CompletedProcess[bytes]":
        self.prepare(host)
        argv, cdir, what = self.runs[host]
        return podman(argv, self.conf, cwd=cdir, what=what, owner=self.paths.root)

    def submit(self) -> None:
        self.started = {host: self.pool.submit(self._start, host) for host in self.runs}

    def check(self) -> t.Set[str]:
        """Raises when a ``podman run`` failed or a container ended during start-up; returns the targets no longer
        to wait for (a batch container whose command ended, and its published port)."""
        for host, run_done in self.started.items():
            if host not in self.pids and run_done.done():
                failed = run_done.exception()
                if failed is not None:
                    raise failed
                self.pids[host] = _read_pid(self.pidfiles[host])
        for host, pid in self.pids.items():
            if host not in self.done and not is_alive(pid):
                argv = self.runs[host][0]
                name = argv[argv.index("--name") + 1]
                code = inspect_containers([name], self.conf, "{{.State.ExitCode}}").get(name, [""])[0] \
                    if host in self.batch else ""
                if code and code not in ENTRYPOINT_REFUSED:
                    self.done.add(host)
                    continue
                raise LocalRuntimeError("container %s ended during start-up:\n%s" % (host, "\n".join(
                    engine_log_tail(self.paths.log(host), 15))))
        return self.done | {"%s (published)" % h for h in self.done}

    def wait(self) -> t.Dict[str, int]:
        """Every container's first process, by host, once every ``podman run`` returned (every sshd answered: each
        returns, if it has not yet)."""
        concurrent.futures.wait(self.started.values())
        self.check()
        return self.pids

    def close(self) -> None:
        """After a failure too: no ``podman run`` is left to make its container after the rollback removed the rest."""
        for run_done in self.started.values():
            run_done.cancel()
        self.pool.shutdown(wait=True)


def _starttime(pid: int) -> t.Optional[int]:
    """A live process's start time (clock ticks since boot: with the pid, what names it), None for none."""
    stat = proc_stat(pid) if pid else None
    return stat[1] if stat else None


def _read_pid(path: str) -> int:
    """The pid in a ``podman run --pidfile`` (0 when it is not there: a container that never ran)."""
    text = (read_text(path) or "").strip()
    return int(text) if text.isdigit() else 0


def engine_log_tail(path: str, count: int) -> t.List[str]:
    """The last lines a container wrote, from podman's k8s-file log (``<time> <stream> <F|P> <text>`` per line)."""
    return [line.split(" ", 3)[3] if line.count(" ") >= 3 else line for line in tail_lines(path, count)]


def _await_sshd(session: LocalSession, paths: SessionPaths, names: t.Dict[str, t.Any], addresses: t.Dict[str, str],
                published: t.Dict[str, t.Tuple[str, int]], journal: Journal, timeout: float,
                check: t.Callable[[], t.Optional[t.Set[str]]], started: t.Optional[t.Callable[[str], bool]] = None,
                retry_interval: float = 0.01) -> None:
    """Wait until every container's sshd answers, and main1's published port too (``check`` raises when a container
    ended meanwhile, or returns the targets no longer to wait for; ``started(host)``: whether a container is worth a
    connection yet, by default every one). Behind agents the containers are reachable only over the overlay: every
    sshd is probed from main1's namespace (so across agents), and main1 is published by a relay, started here."""
    hosts = session.hostnames
    targets = {h: (addresses[h], session.ssh_port) for h in hosts}
    make_socket = None
    if session.agents:
        make_socket = _overlay_prober(netns_path(names["netns"][hosts[0]]))
        for host, addr in published.items():
            journal.record("relay", host=host, published="%s:%d" % addr)
            start_relay(paths, netns_path(names["netns"][host]), addr, session.ssh_port, paths.system_log(host))
    targets.update({"%s (published)" % h: addr for h, addr in published.items()})
    ready = None if started is None else (lambda key: started(key.split(" ", 1)[0]))
    wait_for_ssh(targets, timeout, check, make_socket=make_socket, ready=ready, retry_interval=retry_interval)


def _overlay_prober(main_ns: str) -> t.Callable[[str], socket.socket]:
    """Sockets for wait_for_ssh: in main1's namespace for the containers, here for published ports."""
    def make_socket(key: str) -> socket.socket:
        if key.endswith(" (published)"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            return sock
        return socket_in_netns(main_ns)
    return make_socket


def public_info(info: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    out = dict(info)
    out["containers"] = [{k: v for k, v in c.items() if not k.endswith("_starttime") and k != "has_command"}
                         for c in info["containers"]]
    return out
