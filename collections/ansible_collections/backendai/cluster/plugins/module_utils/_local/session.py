# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local runtime brings up: the session record, made from the typed plan.

:func:`session_record` turns a placed :class:`SessionPlan` (the one the Nomad renderer reads too)
into the runtime's plain form: containers with exactly the environment the Nomad job gives, the
SSH keypair, the mounts and, behind local agents, each container's agent. That form is what the
runtime works with and keeps (``session.json``, the journal); it is made once and not validated
again, since the spec parser validated the names, hostnames, variable names and mount targets.

:func:`from_plan` adds what only this machine can tell (:func:`_prepare`: the runtime's own limits,
mount sources that exist and lie under the configured mount roots, local agents that run).
"""

from __future__ import annotations

import hashlib
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import (
    DEFAULT_MOUNT_ROOTS,
    DEFAULT_NETWORK_KEY_FILE,
    DEFAULT_STATE_ROOT,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.account import user_record
from ansible_collections.backendai.cluster.plugins.module_utils._local.agents import DEFAULT_AGENTS_ROOT, validate_session_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError, SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import path_within, protected_source

#: The agent a session without local agents runs on: this machine.
LOCAL_AGENT = "local"
MAX_CONTAINERS = 250            # hosts of the session's /24, minus gateway


def session_record(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """The runtime's form of a placed plan; with local ``agents`` (name -> local mapping), each
    container behind its planned agent."""
    spec = plan.spec
    return {
        "name": spec.name,
        "session_id": plan.session_id,
        "containers": [{"hostname": c.hostname, "role": c.role, "idx": c.idx, "agent": c.agent if agents else LOCAL_AGENT,
                        "env": container_env(plan, c), "command": list(c.command), "publish": c.is_main,
                        "resources": {"cpu": c.resources.cpu, "memory": c.resources.memory}}
                       for c in plan.containers],
        "ssh": {"port": spec.ssh.port, "private_key": keys.private_key, "public_key": keys.public_key},
        "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in spec.mounts],
        "user": user_record(spec.user),
        "agents": {name: dict(agents[name]) for name in plan.agents_used} if agents else {},
        "underlay_encryption": spec.underlay_encryption,
    }


def from_plan(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]] = None,
              state_root: str = DEFAULT_STATE_ROOT, mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> t.Dict[str, t.Any]:
    """The session record of ``plan``, ready for this machine (raises LocalRuntimeError naming what is not)."""
    return _prepare(session_record(plan, keys, agents), state_root, mount_roots)


def _fail(msg: str) -> LocalRuntimeError:
    return LocalRuntimeError("invalid session: " + msg)


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def mount_source(index: int, source: str, state_root: str, mount_roots: t.Sequence[str],
                 agents: t.Mapping[str, t.Any]) -> str:
    """The real path of mount ``index``'s source, once it is allowed here (LocalRuntimeError naming the field if not).

    Symlinks resolved first, so a link under a root cannot lead out of it: the real path must lie under a
    mount root (real too), and neither be nor hold nor lie below the network key and state paths
    (``_session.schema.protected_source``) or this backend's own directories: the sessions' ``state_root``,
    the local agents' state (their default root and each agent's ``state_dir``) and the control node's key.
    """
    where = "mounts[%d].source" % index
    real = _real(source)
    guarded = protected_source(real)
    own = [_real(p) for p in (state_root, DEFAULT_STATE_ROOT, DEFAULT_AGENTS_ROOT, os.path.dirname(DEFAULT_NETWORK_KEY_FILE))]
    own += [_real(str(a["state_dir"])) for a in agents.values() if isinstance(a, dict) and a.get("state_dir")]
    guarded = guarded or next((p for p in own if path_within(real, p) or path_within(p, real)), "")
    if guarded:
        raise _fail("%s: %s%s must not be %s, below it or a directory above it: it holds the session network's key "
                    "or a session's state" % (where, source, "" if real == source else " (really %s)" % real, guarded))
    roots = [_real(r) for r in mount_roots]
    if not any(path_within(real, r) for r in roots):
        raise _fail("%s: %s%s is not under a mount root; the local backend mounts only from %s (option mount_roots)"
                    % (where, source, "" if real == source else " (really %s)" % real,
                       ", ".join(mount_roots) if mount_roots else "nowhere: mount_roots is empty"))
    return real


def _prepare(session: t.Dict[str, t.Any], state_root: str = DEFAULT_STATE_ROOT,
             mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> t.Dict[str, t.Any]:
    """What the parser cannot know: the runtime's limits, mount sources on this machine, running agents."""
    containers = session["containers"]
    if len(containers) > MAX_CONTAINERS:
        raise _fail("at most %d containers per session, got %d" % (MAX_CONTAINERS, len(containers)))
    for c in containers:
        host = c["hostname"]
        for k, v in c["env"].items():
            if "\n" in v or "\r" in v or "\0" in v:
                raise _fail("%s: environment variable %s contains a newline or NUL (sshd SetEnv cannot carry it)"
                            % (host, k))
        if any("\0" in a for a in c["command"]):
            raise _fail("%s: command must be a list of strings" % host)
        if c["command"] and "=" in c["command"][0]:
            raise _fail("%s: the command's first word may not contain '='" % host)
        if not session["agents"] and c["agent"] != LOCAL_AGENT:
            raise _fail("container %s is placed on agent %r; the local runtime only runs agent 'local'"
                        % (host, c["agent"]))
    mounts = []
    for i, m in enumerate(session["mounts"]):
        src, dst = m["source"], m["target"]
        if not os.path.exists(src):
            raise _fail("mount source %s does not exist" % src)
        real = mount_source(i, src, state_root, mount_roots, session["agents"] or {})
        if not os.path.isdir(real) and not os.path.exists(dst):
            raise _fail("mount source %s is not a directory: its target %s must exist" % (src, dst))
        mounts.append({"source": real, "target": os.path.normpath(dst), "read_only": m["read_only"]})
    agents = {}
    if session["agents"]:  # containers behind local agents (multi-node): see _local.network
        agents = validate_session_agents(session["agents"], list(dict.fromkeys(c["agent"] for c in containers)))
    return dict(session, mounts=mounts, agents=agents)


def resource_names(paths: SessionPaths, spec: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    digest = hashlib.sha256(("%s\0%s\0%s" % (paths.state_root, spec["name"], spec["session_id"])).encode()
                            ).hexdigest()[:8]
    bridge, vxlan = net.link_names(spec["session_id"])
    return {
        "digest": digest,
        "bridge": bridge,                          # made by the session network plugin
        "vxlan": vxlan,                            # (only when the session spans agents)
        "netns": {c["hostname"]: "bai-%s-%s" % (digest, c["hostname"]) for c in spec["containers"]},
    }
