# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local session given as a dict, for the runtime's tests and benchmarks (the collection ships no such way in).

The collection brings a session up from its typed plan only (``_local.runtime.create_planned_session``, through
``_local.session.local_session``). The runtime's tests and benchmarks want sessions no spec can describe
(containers pinned to chosen agents, a session ID of their own), and a form that goes through JSON (to a creator
process of its own): a dict. :func:`plan_of` makes the placed plan of such a dict (the spec it implies, each
container on the agent the dict names); :func:`local_session` makes the runtime's typed session of it, filling in
what it leaves out as a plan would; :func:`session_dict` is the way back; :func:`create_session` brings a session up
through the runtime's own steps after the plan path (the checks of ``_local.session._prepare``, then
``_local.runtime._create`` with the engine start of the plan's rendered Nomad job), so it is rolled back and
journaled alike, and its containers are engine containers of the dict's ``image`` (default :data:`DEFAULT_IMAGE`,
the example image ``scripts/setup`` builds).
"""

from __future__ import annotations

import dataclasses
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_MOUNT_ROOTS
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._local import session as ls
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import EngineRun, NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Mount, Resources
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import Agent
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import MULTI_NODE, SINGLE_NODE, SessionPlan, build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec

#: The image a dict without ``image`` runs (``scripts/setup`` builds it from Debian packages).
DEFAULT_IMAGE = "localhost/backendai-cluster/example:bookworm"
#: What the _ansible layer hands the local backend (``_ansible.backends.session_backend``): the Nomad job's renderer.
TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))


def spec_of(session: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The spec a session dict implies: every container with the first one's command and resources, the dict's
    ``image``, ``env`` (the user's), mounts, user and ssh port."""
    containers = session["containers"]
    agents = {c.get("agent", ls.LOCAL_AGENT) for c in containers}
    spec = {"name": session["name"], "image": session.get("image") or DEFAULT_IMAGE, "cluster_size": len(containers),
            "cluster_mode": MULTI_NODE if len(agents) > 1 else SINGLE_NODE,
            "command": list(containers[0].get("command") or []), "env": dict(session.get("env") or {}),
            "ssh": {"port": session["ssh"]["port"]},
            "mounts": [dict(m) for m in session.get("mounts") or []]}
    if containers[0].get("resources"):
        spec["resources"] = {k: v for k, v in containers[0]["resources"].items() if k in ("cpu", "memory")}
    user = session.get("user")
    if isinstance(user, dict):
        spec["user"] = {k: v for k, v in user.items() if k != "home"}
    return spec


def plan_of(session: t.Mapping[str, t.Any]) -> SessionPlan:
    """The placed plan of a session dict: its spec's plan, each container on the agent the dict names."""
    pinned = [c.get("agent", ls.LOCAL_AGENT) for c in session["containers"]]
    agents = [Agent(a, 10 ** 7, 10 ** 7) for a in dict.fromkeys(pinned)]
    plan = build_plan(parse_spec(spec_of(session)), agents, session["session_id"])
    per_agent: t.Dict[str, int] = {}
    containers = []
    for c, agent in zip(plan.containers, pinned):
        containers.append(dataclasses.replace(c, agent=agent, local_rank=per_agent.get(agent, 0)))
        per_agent[agent] = per_agent.get(agent, 0) + 1
    return dataclasses.replace(plan, containers=tuple(containers), mode=MULTI_NODE if len(per_agent) > 1 else SINGLE_NODE)


def local_session(session: t.Mapping[str, t.Any]) -> ls.LocalSession:
    """``session`` (name, session_id, containers, ssh; optionally mounts, agents, user, underlay_encryption) as the
    runtime's typed session: each container's role, idx, agent, env, command, publish and resources defaulted as a
    plan would have them, the user by the spec's own parser."""
    containers = tuple(ls.LocalContainer(
        hostname=c["hostname"], role=c.get("role", "main" if i == 0 else "sub"), idx=c.get("idx", i + 1),
        agent=c.get("agent", ls.LOCAL_AGENT), env=dict(c.get("env") or {}), command=tuple(c.get("command") or ()),
        publish=bool(c.get("publish", False)), resources=Resources(**(c.get("resources") or {})))
        for i, c in enumerate(session["containers"]))
    user = session.get("user")
    if isinstance(user, dict):  # a dict made by session_dict also has the home, which follows from the name
        user = {k: v for k, v in user.items() if k != "home"}
    ssh = session["ssh"]
    return ls.LocalSession(
        name=session["name"], session_id=session["session_id"], containers=containers,
        keys=SSHKeypair(ssh["private_key"], ssh["public_key"]), ssh_port=ssh["port"],
        user=parse_spec({"name": session["name"], "image": "-", "user": user}).user,
        mounts=tuple(Mount(m["source"], m["target"], bool(m.get("read_only", False))) for m in session.get("mounts") or []),
        agents=session.get("agents") or {}, underlay_encryption=session.get("underlay_encryption", "wireguard"))


def session_dict(session: ls.LocalSession) -> t.Dict[str, t.Any]:
    """The dict of a typed session (what :func:`local_session` reads back)."""
    return {"name": session.name, "session_id": session.session_id,
            "containers": [{"hostname": c.hostname, "role": c.role, "idx": c.idx, "agent": c.agent, "env": dict(c.env),
                            "command": list(c.command), "publish": c.publish,
                            "resources": {"cpu": c.resources.cpu, "memory": c.resources.memory}} for c in session.containers],
            "ssh": {"port": session.ssh_port, "private_key": session.keys.private_key, "public_key": session.keys.public_key},
            "user": {"name": session.user.name, "uid": session.user.uid, "gid": session.user.gid},
            "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in session.mounts],
            "agents": {a: dict(v) for a, v in session.agents.items()}, "underlay_encryption": session.underlay_encryption}


def create_session(session: t.Mapping[str, t.Any], state_root: str,
                   mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> t.Dict[str, t.Any]:
    """Bring ``session`` up as the runtime brings up a plan (engine containers of its image, started as the tasks of
    the plan's rendered Nomad job): checked for this machine first, rolled back on failure."""
    prepared = ls._prepare(local_session(session), state_root, mount_roots)  # pylint: disable=protected-access
    return rt._create(prepared, state_root, EngineRun(TASK.render(plan_of(session)), TASK))  # pylint: disable=protected-access
