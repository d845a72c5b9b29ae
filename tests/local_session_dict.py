# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local session given as a dict, for the runtime's tests and benchmarks (the collection ships no such way in).

The collection brings a session up from its typed plan only (``_local.runtime.create_planned_session``). The
runtime's tests and benchmarks want sessions no spec can describe (any command and environment per container,
containers pinned to chosen agents), so they hand the runtime its record form directly: :func:`session_record`
fills in what such a dict leaves out, in the form ``_local.session.session_record`` gives a plan, and
:func:`create_session` brings it up through the runtime's own steps after the plan path (the checks of
``_local.session._prepare``, then ``_local.runtime._create``), so it is rolled back and journaled alike.
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_MOUNT_ROOTS
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._local import session as ls
from ansible_collections.backendai.cluster.plugins.module_utils._local.account import user_record
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Resources
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec


def session_record(session: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """``session`` (name, session_id, containers, ssh; optionally mounts, agents, user, underlay_encryption) in the
    runtime's record form: each container's role, idx, agent, env, command, publish and resources defaulted as a
    plan would have them, the user by the spec's own parser."""
    containers = [{"hostname": c["hostname"], "role": c.get("role", "main" if i == 0 else "sub"), "idx": c.get("idx", i + 1),
                   "env": dict(c.get("env") or {}), "command": list(c.get("command") or []),
                   "publish": bool(c.get("publish", False)), "agent": c.get("agent", ls.LOCAL_AGENT),
                   "resources": dict({"cpu": Resources().cpu, "memory": Resources().memory}, **(c.get("resources") or {}))}
                  for i, c in enumerate(session["containers"])]
    user = session.get("user")
    if isinstance(user, dict):  # a record's user also has its home, which follows from the name
        user = {k: v for k, v in user.items() if k != "home"}
    ssh = session["ssh"]
    return {"name": session["name"], "session_id": session["session_id"], "containers": containers,
            "mounts": [{"source": m["source"], "target": m["target"], "read_only": bool(m.get("read_only", False))}
                       for m in session.get("mounts") or []],
            "agents": session.get("agents") or {}, "user": user_record(parse_spec({"name": session["name"], "image": "-", "user": user}).user),
            "underlay_encryption": session.get("underlay_encryption", "wireguard"),
            "ssh": {"port": ssh["port"], "private_key": ssh["private_key"], "public_key": ssh["public_key"]}}


def create_session(session: t.Mapping[str, t.Any], state_root: str,
                   mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> t.Dict[str, t.Any]:
    """Bring ``session`` up as the runtime brings up a plan: checked for this machine first, rolled back on failure."""
    return rt._create(ls._prepare(session_record(session), state_root, mount_roots), state_root)  # pylint: disable=protected-access
