# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local runtime brings up: the typed session, made once from the typed plan.

:func:`local_session` turns a placed :class:`SessionPlan` (the one the Nomad renderer reads too) into a
:class:`LocalSession`: its containers with exactly the environment the Nomad job gives, the SSH keypair,
the spec's mounts and user and, behind local agents, each container's agent. That is what the runtime
brings up (``_local.bringup`` reads it, nothing turns it back into a dict); it is made once and not
validated again, since the spec parser validated the names, hostnames, variable names and mount targets.
What the runtime keeps on disk (``session.json``, the journal) is written from it by the bring-up.

:func:`from_plan` adds what only this machine can tell (:func:`_prepare`: the runtime's own limits,
mount sources that exist and lie under the configured mount roots, local agents that run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import (
    DEFAULT_AGENTS_ROOT,
    DEFAULT_MOUNT_ROOTS,
    DEFAULT_NETWORK_KEY_FILE,
    DEFAULT_STATE_ROOT,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import LOCAL_AGENT_NAME, netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError, SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import (
    Mount,
    Resources,
    UserSpec,
    path_within,
    protected_source,
)

#: The agent a session without local agents runs on: this machine.
LOCAL_AGENT = "local"
MAX_CONTAINERS = 250            # hosts of the session's /24, minus gateway
#: What a session needs of each local agent (of the ``local`` mapping ``_local.agents`` lists it with).
AGENT_KEYS = ("netns", "underlay_ip", "underlay_mtu", "cni_config_dir", "state_dir")


@dataclasses.dataclass(frozen=True)
class LocalContainer:
    """One container of a local session, as the plan lays it out."""

    hostname: str
    role: str
    idx: int
    agent: str  # LOCAL_AGENT without local agents
    env: t.Mapping[str, str]  # exactly the Nomad job's (``_session.env.container_env``)
    command: t.Tuple[str, ...]
    publish: bool  # its ssh port published on this machine (main1's)
    resources: Resources


@dataclasses.dataclass(frozen=True)
class LocalSession:
    """A placed session as the local runtime brings it up (``agents``: local agent name -> its ``local``
    mapping, as ``_local.agents`` lists it; empty on this machine)."""

    name: str
    session_id: str
    containers: t.Tuple[LocalContainer, ...]
    keys: SSHKeypair
    ssh_port: int
    user: UserSpec
    mounts: t.Tuple[Mount, ...]
    agents: t.Mapping[str, t.Mapping[str, t.Any]]
    underlay_encryption: str

    @property
    def hostnames(self) -> t.List[str]:
        return [c.hostname for c in self.containers]


def local_session(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]] = None) -> LocalSession:
    """The session of a placed plan; with local ``agents`` (name -> local mapping), each container behind its
    planned agent."""
    spec = plan.spec
    return LocalSession(
        name=spec.name, session_id=plan.session_id,
        containers=tuple(LocalContainer(c.hostname, c.role, c.idx, c.agent if agents else LOCAL_AGENT, container_env(plan, c),
                                        c.command, c.is_main, c.resources) for c in plan.containers),
        keys=keys, ssh_port=spec.ssh.port, user=spec.user, mounts=spec.mounts,
        agents={name: dict(agents[name]) for name in plan.agents_used} if agents else {},
        underlay_encryption=spec.underlay_encryption)


def from_plan(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]] = None,
              state_root: str = DEFAULT_STATE_ROOT, mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> LocalSession:
    """The session of ``plan``, ready for this machine (raises LocalRuntimeError naming what is not)."""
    return _prepare(local_session(plan, keys, agents), state_root, mount_roots)


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


def _prepare(session: LocalSession, state_root: str = DEFAULT_STATE_ROOT,
             mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS) -> LocalSession:
    """What the parser cannot know: the runtime's limits, mount sources on this machine, running agents."""
    containers = session.containers
    if len(containers) > MAX_CONTAINERS:
        raise _fail("at most %d containers per session, got %d" % (MAX_CONTAINERS, len(containers)))
    for c in containers:
        for k, v in c.env.items():
            if "\n" in v or "\r" in v or "\0" in v:
                raise _fail("%s: environment variable %s contains a newline or NUL (sshd SetEnv cannot carry it)"
                            % (c.hostname, k))
        if any("\0" in a for a in c.command):
            raise _fail("%s: command must be a list of strings" % c.hostname)
        if c.command and "=" in c.command[0]:
            raise _fail("%s: the command's first word may not contain '='" % c.hostname)
        if not session.agents and c.agent != LOCAL_AGENT:
            raise _fail("container %s is placed on agent %r; the local runtime only runs agent 'local'"
                        % (c.hostname, c.agent))
    mounts = []
    for i, m in enumerate(session.mounts):
        if not os.path.exists(m.source):
            raise _fail("mount source %s does not exist" % m.source)
        real = mount_source(i, m.source, state_root, mount_roots, session.agents)
        if not os.path.isdir(real) and not os.path.exists(m.target):
            raise _fail("mount source %s is not a directory: its target %s must exist" % (m.source, m.target))
        mounts.append(Mount(real, os.path.normpath(m.target), m.read_only))
    agents: t.Mapping[str, t.Mapping[str, t.Any]] = {}
    if session.agents:  # containers behind local agents (multi-node): see _local.agent_network
        agents = validate_session_agents(session.agents, list(dict.fromkeys(c.agent for c in containers)))
    return dataclasses.replace(session, mounts=tuple(mounts), agents=agents)


def validate_session_agents(raw: t.Any, used: t.List[str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """The ``agents`` of a local session: name -> its ``local`` mapping (as ``_local.agents.create_agents`` lists it)."""
    if not isinstance(raw, dict):
        raise _fail("agents must map agent names to local agents")
    out = {}
    for name in used:
        info = raw.get(name)
        if not isinstance(info, dict):
            raise _fail("container placed on agent %r, which is not a local agent" % (name,))
        if not LOCAL_AGENT_NAME.match(name) or any(k not in info for k in AGENT_KEYS):
            raise _fail("agent %r needs %s (make the agents with local_agents)" % (name, ", ".join(AGENT_KEYS)))
        try:
            ipaddress.IPv4Address(str(info["underlay_ip"]))
        except ValueError:
            raise _fail("agent %s has no IPv4 underlay address" % name) from None
        if not os.path.exists(netns_path(str(info["netns"]))):
            raise LocalRuntimeError("local agent %s is not running (network namespace %s missing); create the agents "
                                    "with playbooks/local_agents.yml" % (name, info["netns"]))
        out[name] = {k: info[k] for k in AGENT_KEYS}
    return out


def resource_names(paths: SessionPaths, session: LocalSession) -> t.Dict[str, t.Any]:
    digest = hashlib.sha256(("%s\0%s\0%s" % (paths.state_root, session.name, session.session_id)).encode()
                            ).hexdigest()[:8]
    bridge, vxlan = net.link_names(session.session_id)
    return {
        "digest": digest,
        "bridge": bridge,                          # made by the session network plugin
        "vxlan": vxlan,                            # (only when the session spans agents)
        "netns": {c.hostname: "bai-%s-%s" % (digest, c.hostname) for c in session.containers},
    }
