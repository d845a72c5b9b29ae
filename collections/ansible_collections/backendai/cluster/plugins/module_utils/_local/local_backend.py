# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``local`` backend: a real cluster session on this one machine (see ``_local.runtime``).

:class:`LocalBackend` implements the interface of ``_session.protocol.SessionBackend`` (present,
absent, info), as the Nomad backend does; the session view it returns is the one described there,
with ``backend: "local"`` and ``state_dir``.

The machine is one agent, ``local``, with its CPU (cores × MHz) and memory as capacity, so the
same placement rules apply (a session larger than the machine is PENDING). With ``agents`` (local
agents made by ``_local.agents``: network-namespace "hosts" of this machine, each with its
capacity and a ``local`` mapping) the session is placed on those instead, and a multi-node plan
spreads its containers over them, joined by a VXLAN segment (see ``_local.agent_network``). The same plan, the
same environment (``container_env``) and the same kind of keypair as the Nomad backend are used.
A record next to the runtime's state (``backend.json``: the normalised spec, its digest and the
public key) makes ``present`` idempotent: the same spec on a session with no broken container
changes nothing; a changed spec, or a session with a broken container (failed: its command exited
non-zero or was killed, or an interactive container's sshd died), is recreated with the same keys, and
so is a stopped one (``stop``: ``state: stopped``, docs/session-lifecycle.md).
Container statuses and the session state follow the Nomad job's model (``_session.status``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_MOUNT_ROOTS, DEFAULT_STATE_ROOT
from ansible_collections.backendai.cluster.plugins.module_utils._errors import AgentsError, ModuleFailure, PlanError, Problem
from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.reaper import end_reaper, start_reaper
from ansible_collections.backendai.cluster.plugins.module_utils._local.session import LOCAL_AGENT
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask, refuse_host_files
from ansible_collections.backendai.cluster.plugins.module_utils._local.runtime import (
    create_planned_session,
    destroy_session,
    list_sessions,
    session_status,
    stop_session,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import Agent, parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.protocol import absent_name
from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import failure_reason
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import STOPPED, needs_repair
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import broken_summary, plan_summary, wait_progress
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import (
    SSHKeypair,
    derive_session_id,
    generate_keypair,
)

RECORD_FILE = "backend.json"
PRIVATE_KEY_FILE = os.path.join("ssh", "id_cluster")  # where the runtime keeps the session key (0600)


def local_agent() -> Agent:
    """This machine as an agent: every core at its nominal MHz, all of its memory, no GPU."""
    cores = os.cpu_count() or 1
    mhz = 1000.0
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            speeds = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        if speeds:
            mhz = max(speeds)
    except (OSError, ValueError):
        pass
    memory = 1024
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return Agent(LOCAL_AGENT, int(cores * mhz), memory, 0, "local")


def _spec_dict(spec: SessionSpec) -> t.Dict[str, t.Any]:
    """The spec as the record keeps it; the lifetime keys only when set (a session recorded before they existed is
    unchanged by the same spec)."""
    out = dataclasses.asdict(spec)
    for key, unset in (("max_run_time", 0), ("keep_after", None)):
        if out.get(key) == unset:
            out.pop(key, None)
    return out


def _digest(spec: SessionSpec, agents: t.Optional[t.Sequence[t.Any]] = None) -> str:
    text = json.dumps(_spec_dict(spec), sort_keys=True)
    if agents is not None:  # other agents (or capacities) may mean another placement
        text += json.dumps(agents, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def local_agents(agents: t.Optional[t.Sequence[t.Any]]) -> t.Optional[t.Dict[str, t.Dict[str, t.Any]]]:
    """Name -> ``local`` mapping of agents made by ``local_agents``; None without agents (this machine)."""
    if agents is None:
        return None
    parse_agents(list(agents))
    out = {}
    problems = []
    for i, a in enumerate(agents):
        if not isinstance(a.get("local"), dict):
            problems.append(Problem("agents[%d].local" % i, "is required by the local backend: its agents are local agents, made by "
                                    "playbooks/local_agents.yml (backendai.cluster.local_agents)", a.get("name"), True))
        else:
            out[a["name"]] = a["local"]
    if problems:
        raise AgentsError(problems)
    return out


def _spec_text(spec: SessionSpec) -> str:
    return json.dumps(_spec_dict(spec), indent=2, sort_keys=True) + "\n"


def _root(state_root: str) -> str:
    return os.path.abspath(os.path.expanduser(state_root or DEFAULT_STATE_ROOT))


def _read_record(state_root: str, name: str) -> t.Optional[t.Dict[str, t.Any]]:
    try:
        with open(os.path.join(state_root, name, RECORD_FILE), encoding="utf-8") as f:
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def _write_record(state_root: str, name: str, record: t.Mapping[str, t.Any]) -> None:
    write_file(os.path.join(state_root, name, RECORD_FILE), json.dumps(record, indent=2, sort_keys=True))


def _stored_keys(state_root: str, name: str, record: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[SSHKeypair]:
    """The keypair of an existing session, so that a recreated session keeps its keys and ID."""
    if not record or not record.get("public_key"):
        return None
    try:
        with open(os.path.join(state_root, name, PRIVATE_KEY_FILE), encoding="utf-8") as f:
            private = f.read()
    except OSError:
        return None
    return SSHKeypair(private, record["public_key"]) if "PRIVATE KEY" in private else None


def _view(status: t.Mapping[str, t.Any], record: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    """The backend-neutral session view of the runtime's status (no secrets)."""
    record = record or {}
    layout = {c["hostname"]: c for c in record.get("plan", {}).get("containers", [])}
    containers = []
    for c in status.get("containers", []):
        known = layout.get(c["hostname"], {})
        containers.append({
            "hostname": c["hostname"], "role": known.get("role", ""), "idx": known.get("idx", 0),
            "agent": known.get("agent") or LOCAL_AGENT, "address": c.get("address") or "", "status": c["state"],
            "command": c.get("command"), "exit_code": c.get("exit_code"), "restarts": c.get("restarts", 0), "reason": c.get("reason", ""),
            "log_tail": list(c.get("log_tail", [])), "log": c.get("log", ""),
        })
        if c.get("last_failure"):
            containers[-1]["last_failure"] = dict(c["last_failure"])
    batch = any(c.get("command") not in (None, "none") for c in containers)
    published = status.get("published") or ""
    host, _sep, port = published.rpartition(":")
    ssh_config = os.path.join(status.get("state_dir", ""), "ssh_config") if status.get("state_dir") else ""
    plan = record.get("plan", {})
    view: t.Dict[str, t.Any] = {
        "name": status["name"], "backend": "local", "session_id": status.get("session_id", plan.get("session_id", "")),
        "state": "SCHEDULED" if status["state"] == "CREATING" else status["state"], "mode": plan.get("mode", ""), "network_mode": plan.get("network_mode", ""),
        "underlay_encryption": status.get("underlay_encryption") or "none",
        "state_dir": status.get("state_dir", ""), "containers": containers,
        "reason": failure_reason(status.get("failure")) or broken_summary(containers) or status.get("message", ""),
        "main1": {"address": host, "ssh_port": int(port) if port.isdigit() else None,
                  "ssh_command": "ssh -F %s main1" % ssh_config if ssh_config else ""},
        "progress": wait_progress(containers, batch=batch),
    }
    if status.get("failure"):
        view["failure"] = dict(status["failure"])
    return view


def _planned_view(summary: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """What check mode shows for a session that does not exist yet: the plan, nothing running."""
    view: t.Dict[str, t.Any] = {
        "name": summary["name"], "backend": "local", "session_id": summary["session_id"], "state": "PENDING",
        "mode": summary["mode"], "network_mode": summary["network_mode"], "state_dir": "",
        "containers": [{"hostname": c["hostname"], "role": c["role"], "idx": c["idx"], "agent": c["agent"] or LOCAL_AGENT,
                        "address": "", "status": "planned", "command": None, "exit_code": None, "restarts": 0,
                        "log_tail": [], "log": ""} for c in summary["containers"]],
        "main1": {"address": "", "ssh_port": None, "ssh_command": ""},
    }
    view["progress"] = wait_progress(view["containers"])
    return view


class LocalBackend:
    """The local backend behind the interface of ``_session.protocol.SessionBackend``."""

    def __init__(self, state_root: t.Optional[str] = None, mount_roots: t.Optional[t.Sequence[str]] = None,
                 task: t.Optional[NomadTask] = None) -> None:
        self.root = _root(state_root or DEFAULT_STATE_ROOT)
        #: the only directories spec mounts may come from (``_local.session.mount_source``)
        self.mount_roots = tuple(DEFAULT_MOUNT_ROOTS if mount_roots is None else mount_roots)
        #: the Nomad job's renderer, for sessions of container images (run as the job's tasks on the engine)
        self.task = task

    def present(self, spec_raw: t.Any, agents: t.Optional[t.List[t.Dict[str, t.Any]]] = None, check_mode: bool = False,
                diff: bool = False, wait: bool = True, wait_timeout: float = 300.0,
                wait_for_resources: float = 0.0) -> t.Dict[str, t.Any]:
        """Make the session run on this machine (or on its local ``agents``). ``wait``/``wait_timeout`` are
        moot (create returns once every sshd accepts connections), and so is ``wait_for_resources``
        (this machine's capacity does not change while waiting); ``diff`` is always returned."""
        root = self.root
        spec = parse_spec(spec_raw)
        refuse_host_files(spec_raw)
        behind = local_agents(agents)
        record = _read_record(root, spec.name)
        status = session_status(spec.name, root)
        digest = _digest(spec, agents)
        exists = status.get("exists", False)
        statuses = [c["state"] for c in status.get("containers", [])]
        if exists and record and record.get("digest") == digest and statuses and not needs_repair(statuses) \
                and status["state"] not in ("CREATING", STOPPED):
            # RUNNING, or TERMINATED (every batch command completed: not run again, as on Nomad), or
            # DEGRADED only because some commands completed while others run: nothing to repair
            return {"changed": False, "created": False, "session": _view(session_status(spec.name, root), record),
                    "plan": record["plan"]}

        keys = _stored_keys(root, spec.name, record) if exists else None
        if keys is None and not check_mode:
            keys = generate_keypair(spec.ssh.key_type, spec.ssh.key_bits or 3072)
        placement = parse_agents(list(agents)) if agents is not None else [local_agent()]
        plan = build_plan(spec, placement, derive_session_id(spec.name, keys.public_key if keys else ""))
        summary = plan_summary(plan)
        if not plan.placed:
            raise PlanError("session %s is PENDING on %s: %s" % (spec.name, "the local agents" if behind is not None
                                                                 else "this machine", plan.reason))
        before = record.get("spec_text", "") if record else ""
        changes = {"before": before, "after": _spec_text(spec), "before_header": "%s (local)" % spec.name,
                   "after_header": "%s (local)" % spec.name}
        if check_mode or keys is None:
            return {"changed": True, "created": False, "session": _view(status, record) if exists else _planned_view(summary),
                    "plan": summary, "diff": changes}
        if exists:  # a changed spec, a broken container, a stopped session: recreate it with the same keys (and ID)
            end_reaper(spec.name, root)
            destroy_session(spec.name, root)
        create_planned_session(plan, keys, behind, root, self.mount_roots, self.task)
        new_record = {"digest": digest, "public_key": keys.public_key, "plan": summary, "spec_text": _spec_text(spec)}
        _write_record(root, spec.name, new_record)
        if spec.keep_after is not None:  # removes the session keep_after seconds after it finished (_local.reaper)
            start_reaper(spec.name, root, spec.keep_after)
        return {"changed": True, "created": not exists, "session": _view(session_status(spec.name, root), new_record),
                "plan": summary, "diff": changes}

    def absent(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
               diff: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
        name = absent_name(name, spec_raw)
        root = self.root
        status = session_status(name, root)
        gone = {"name": name, "backend": "local", "state": "TERMINATED", "containers": [], "main1": {}}
        if not status.get("exists", False) or (keep_logs and status["state"] == "TERMINATED"
                                               and not status.get("containers")):
            return {"changed": False, "session": gone}
        if check_mode:
            return {"changed": True, "session": _view(status, _read_record(root, name))}
        end_reaper(name, root)
        result = destroy_session(name, root, keep_logs=keep_logs)
        out: t.Dict[str, t.Any] = {"changed": result["changed"], "session": gone}
        if result.get("logs"):
            out["logs"] = result["logs"]
        return out

    def stop(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
             diff: bool = False) -> t.Dict[str, t.Any]:
        """Stop the session (``_local.runtime.stop_session``): its containers, network namespaces and network go, its
        state directory keeps the keys, the record and the logs; ``present`` starts it again with the same keys."""
        name = absent_name(name, spec_raw)
        root = self.root
        status = session_status(name, root)
        record = _read_record(root, name)
        if not status.get("exists", False) or not record:
            raise ModuleFailure("session %s does not exist in %s: there is nothing to stop (state=present creates it)"
                                % (name, root))
        if status["state"] == STOPPED:
            return {"changed": False, "session": _view(status, record)}
        if status["state"] == "CREATING":
            raise ModuleFailure("session %s is being created by another run; stop it once that run ended" % name)
        out: t.Dict[str, t.Any] = {"changed": True}
        if diff:
            out["diff"] = {"before": "session %s: %s\n" % (name, status["state"]), "after": "session %s: %s\n" % (name, STOPPED),
                           "before_header": "%s (local)" % name, "after_header": "%s (local)" % name}
        if check_mode:
            return dict(out, session=_view(status, record))
        end_reaper(name, root)
        stop_session(name, root, keep=(RECORD_FILE,))
        return dict(out, session=_view(session_status(name, root), record))

    def info(self, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
        root = self.root
        names = [name] if name else [s["name"] for s in list_sessions(root)]
        views = []
        for n in names:
            status = session_status(n, root, log_lines=log_lines)
            if status.get("exists"):
                views.append(_view(status, _read_record(root, n)))
        return views
