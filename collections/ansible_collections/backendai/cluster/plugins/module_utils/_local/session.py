# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local runtime brings up: the session record, made from the typed plan or given as a dict.

:func:`session_record` turns a placed :class:`SessionPlan` (the one the Nomad renderer reads too)
into the runtime's plain form: containers with exactly the environment the Nomad job gives, the
SSH keypair, the mounts and, behind local agents, each container's agent. That form is what the
runtime works with and keeps (``session.json``, the journal); it is made once and not validated
again, since the spec parser validated the names, hostnames, variable names and mount targets.

:func:`from_plan` adds what only this machine can tell (:func:`_prepare`: the runtime's own limits,
mount sources that exist, local agents that run). :func:`from_raw` is for callers that hand the
runtime a dict of their own (its tests, benchmarks): that dict went through no parser, so it is
checked here, with the spec's own patterns.
"""

from __future__ import annotations

import hashlib
import os
import typing as t
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._local.agents import validate_session_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError, SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import ENV_NAME_RE, HOSTNAME_RE, NAME_RE, kernel_fs

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
                        "env": container_env(plan, c), "command": list(c.command), "publish": c.is_main}
                       for c in plan.containers],
        "ssh": {"port": spec.ssh.port, "private_key": keys.private_key, "public_key": keys.public_key},
        "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in spec.mounts],
        "agents": {name: dict(agents[name]) for name in plan.agents_used} if agents else {},
        "underlay_encryption": spec.underlay_encryption,
    }


def from_plan(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """The session record of ``plan``, ready for this machine (raises LocalRuntimeError naming what is not)."""
    return _prepare(session_record(plan, keys, agents))


def _fail(msg: str) -> LocalRuntimeError:
    return LocalRuntimeError("invalid session: " + msg)


def _prepare(session: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
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
    for m in session["mounts"]:
        src, dst = m["source"], m["target"]
        if not os.path.exists(src):
            raise _fail("mount source %s does not exist" % src)
        if not os.path.isdir(src) and not os.path.exists(dst):
            raise _fail("mount source %s is not a directory: its target %s must exist" % (src, dst))
        mounts.append({"source": os.path.realpath(src), "target": os.path.normpath(dst), "read_only": m["read_only"]})
    agents = {}
    if session["agents"]:  # containers behind local agents (multi-node): see _local.network
        agents = validate_session_agents(session["agents"], list(dict.fromkeys(c["agent"] for c in containers)))
    return dict(session, mounts=mounts, agents=agents)


def from_raw(session: t.Any) -> t.Dict[str, t.Any]:
    """A session dict from a caller of the runtime itself, checked and normalised (LocalRuntimeError naming the field)."""
    if not isinstance(session, dict):
        raise _fail("expected a dict")
    name = session.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _fail("name must match [A-Za-z0-9_-]{1,64}, got %r" % (name,))
    try:
        session_id = str(uuid.UUID(str(session.get("session_id"))))
    except ValueError:
        raise _fail("session_id must be a UUID, got %r" % (session.get("session_id"),)) from None
    ssh = session.get("ssh")
    if not isinstance(ssh, dict):
        raise _fail("ssh must be a dict")
    port = ssh.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise _fail("ssh.port must be an integer port, got %r" % (port,))
    for key in ("private_key", "public_key"):
        if not isinstance(ssh.get(key), str) or not ssh[key].strip():
            raise _fail("ssh.%s must be a non-empty string" % key)
    if "PRIVATE KEY" not in ssh["private_key"]:
        raise _fail("ssh.private_key is not a private key")  # never echo it
    containers = session.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _fail("containers must be a non-empty list")
    if len(containers) > MAX_CONTAINERS:
        raise _fail("at most %d containers per session, got %d" % (MAX_CONTAINERS, len(containers)))
    out: t.List[t.Dict[str, t.Any]] = []
    seen: t.Set[str] = set()
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            raise _fail("containers[%d] must be a dict" % i)
        host = c.get("hostname")
        if not isinstance(host, str) or not HOSTNAME_RE.match(host):
            raise _fail("containers[%d].hostname must match [a-z][a-z0-9-]{0,62}, got %r" % (i, host))
        if host in seen:
            raise _fail("duplicate hostname %s" % host)
        seen.add(host)
        env = c.get("env") or {}
        if not isinstance(env, dict):
            raise _fail("containers[%d].env must be a dict" % i)
        for k, v in env.items():
            if not isinstance(k, str) or not ENV_NAME_RE.match(k):
                raise _fail("%s: bad environment variable name %r" % (host, k))
            if not isinstance(v, str):
                raise _fail("%s: environment variable %s must be a string" % (host, k))
        command = c.get("command") or []
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise _fail("%s: command must be a list of strings" % host)
        out.append({"hostname": host, "role": str(c.get("role", "main" if i == 0 else "sub")),
                    "idx": c.get("idx", i + 1), "env": dict(env), "command": list(command),
                    "publish": bool(c.get("publish", False)), "agent": str(c.get("agent", LOCAL_AGENT))})
    mounts = []
    for i, m in enumerate(session.get("mounts") or []):
        if not isinstance(m, dict):
            raise _fail("mounts[%d] must be a dict" % i)
        src, dst = m.get("source"), m.get("target")
        if not isinstance(src, str) or not os.path.isabs(src):
            raise _fail("mounts[%d].source must be an absolute path" % i)
        if not isinstance(dst, str) or not os.path.isabs(dst) or os.path.normpath(dst) == "/":
            raise _fail("mounts[%d].target must be an absolute path other than /" % i)
        if kernel_fs(dst):
            raise _fail("mounts[%d].target must not be %s or below it (the container's own)" % (i, kernel_fs(dst)))
        mounts.append({"source": src, "target": dst, "read_only": bool(m.get("read_only", False))})
    return _prepare({"name": name, "session_id": session_id, "containers": out, "mounts": mounts,
                     "agents": session.get("agents") or {},
                     "underlay_encryption": _underlay_encryption(session.get("underlay_encryption", "wireguard")),
                     "ssh": {"port": port, "private_key": ssh["private_key"], "public_key": ssh["public_key"]}})


def _underlay_encryption(value: t.Any) -> str:
    if value not in net.UNDERLAY_ENCRYPTIONS:
        raise _fail("underlay_encryption must be one of %s, got %r" % (", ".join(net.UNDERLAY_ENCRYPTIONS), value))
    return str(value)


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
