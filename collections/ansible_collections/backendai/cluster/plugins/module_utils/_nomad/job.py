# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering a session plan into a Nomad job, as the JSON body of Nomad's HTTP API.

Shape of the job (one task group per container, named by its hostname, ``Count`` 1):

* pinned to the planned agent with a ``${node.unique.name}`` constraint;
* network ``cni/backendai`` for every group, with the container's hostname and the session
  network's parameters in ``cni { args }``, signed for this job and group (``_nomad.job_network``);
  a job constraint keeps Nomad clients older than 1.10 out;
* a Nomad-provider service per container, all under one service name and tagged with the
  hostname, so that one constant template renders every peer's address (``nomadService``);
* session-wide values (HOSTS, SIZE, REPLICAS, MODE, SESSION_ID, MASTER_*, the TF worker list)
  live once in job ``Meta``; each group's ``Env`` refers to them as ``${NOMAD_META_...}``, so the
  job grows linearly with the number of containers;
* the SSH keypair is never in the job: the task renders it at runtime from the secret backend
  (``nomadVar "nomad/jobs/<job>"`` or Vault KV v2) into ``secrets/`` with mode 0600;
* only main1 publishes ports (sshd and the spec's ``ports``).

Every key is one of Nomad's API names (checked against ``nomad-job-lint``). Pure and
deterministic: the same plan gives the same dict, and :func:`dumps` gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import (
    SESSION_VARIABLES,
    container_values,
    session_values,
    tf_workers_json,
)
from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import (
    VERSION_CONSTRAINT,
    JobNetwork,
    RenderedNetwork,
    group_args,
    signing_keys,
    session_network,
    session_slots,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import Container, SessionPlan

#: Job Meta key that marks jobs made by this collection (``session_info`` finds sessions by it).
MANAGED_META_KEY = "backendai_cluster_session"
TF_WORKERS_META_KEY = "BACKENDAI_TF_WORKERS"
SSH_PORT_META_KEY = "BACKENDAI_SSH_PORT"
#: The entrypoint script lives once in job Meta; each task renders it with a one-line template.
ENTRYPOINT_META_KEY = "BACKENDAI_ENTRYPOINT"
#: Items of the secret (Nomad Variable or Vault KV) the tasks read.
PRIVATE_KEY_ITEM = "ssh_private_key"
PUBLIC_KEY_ITEM = "ssh_public_key"
TASK_NAME = "kernel"
SECRETS_SUBDIR = "secrets/backendai"
LOCAL_SUBDIR = "local/backendai"

NANOSECOND = 1
SECOND = 1000000000 * NANOSECOND

# The entrypoint every container runs: wait until every peer is registered, write /etc/hosts,
# set up root's SSH client and sshd with the session keypair, then run the user command (or keep
# sshd in the foreground for an interactive session). POSIX sh, so any image with OpenSSH works.
ENTRYPOINT = r"""#!/bin/sh
set -eu
S=${NOMAD_SECRETS_DIR:-/secrets}/backendai L=${NOMAD_TASK_DIR:-/local}/backendai P=$BACKENDAI_SSH_PORT
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || {
  echo "backendai: sshd not found; cluster sessions need OpenSSH server in the image" >&2; exit 78; }
i=0
while [ "$(grep -c . $L/peers 2>/dev/null || true)" -lt "$BACKENDAI_CLUSTER_SIZE" ]; do
  i=$((i+1)); [ $i -le 1200 ] || { echo "backendai: peers not all registered after 600s" >&2; exit 75; }
  sleep 0.5
done
cat $L/peers >> /etc/hosts
mkdir -p -m 700 /root/.ssh /run/sshd
install -m 600 $S/id /root/.ssh/id_backendai
cat $S/id.pub >> /root/.ssh/authorized_keys
echo "* $(cut -d' ' -f1,2 $S/id.pub)" > /root/.ssh/known_hosts_backendai
{ echo "Host $(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' ')"; echo " Port $P"
  echo " IdentityFile /root/.ssh/id_backendai"; echo " StrictHostKeyChecking yes"
  echo " UserKnownHostsFile /root/.ssh/known_hosts_backendai"; } >> /root/.ssh/config
env | grep -E '^(BACKENDAI_|WORLD_|RANK=|LOCAL_RANK=|MASTER_|TF_CONFIG=)' > /root/.ssh/environment || true
D="$(command -v sshd || echo /usr/sbin/sshd) -p $P -h /root/.ssh/id_backendai"
D="$D -o PermitRootLogin=prohibit-password -o PasswordAuthentication=no -o PermitUserEnvironment=yes"
if [ $# -eq 0 ]; then exec $D -D -e; fi
$D
exec "$@"
"""

PEERS_TEMPLATE = '{{ range nomadService "%s" }}{{ .Address }} {{ index .Tags 0 }}\n{{ end }}'


def service_name(job_id: str) -> str:
    """One Nomad service name for all containers of a session (a valid RFC 1123 label, ≤ 63)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")[:40] or "session"
    return "bai-%s-%s" % (slug, hashlib.sha256(job_id.encode("utf-8")).hexdigest()[:8])


def secret_path(plan: SessionPlan) -> str:
    """Where the keypair lives: ``nomad/jobs/<job>`` (Nomad Variables) or the Vault KV v2 path."""
    spec = plan.spec
    if spec.secrets.backend == "vault":
        return "/".join(p for p in (spec.secrets.path, spec.name) if p)
    return "nomad/jobs/%s" % spec.name


def _secret_template(plan: SessionPlan, item: str) -> str:
    spec = plan.spec
    if spec.secrets.backend == "vault":
        return '{{ with secret "%s/data/%s" }}{{ .Data.data.%s }}{{ end }}' % (spec.secrets.mount, secret_path(plan), item)
    return '{{ with nomadVar "%s" }}{{ .%s }}{{ end }}' % (secret_path(plan), item)


def _env(container: Container) -> t.Dict[str, str]:
    env = dict(container.user_env)
    for name in SESSION_VARIABLES:
        env[name] = "${NOMAD_META_%s}" % name
    # TF_CONFIG keeps the seed's exact JSON; only the worker list comes from Meta.
    env.update(container_values(container, "${NOMAD_META_%s}" % TF_WORKERS_META_KEY))
    env["BACKENDAI_SSH_PORT"] = "${NOMAD_META_%s}" % SSH_PORT_META_KEY
    return dict(sorted(env.items()))


def _driver_config(plan: SessionPlan, container: Container) -> t.Dict[str, t.Any]:
    spec = plan.spec
    entry = ["/bin/sh", "/%s/entrypoint.sh" % LOCAL_SUBDIR]
    config: t.Dict[str, t.Any] = {"image": container.image, "entrypoint": entry}
    if container.command:
        config["args"] = list(container.command)
    if spec.mounts:
        if spec.driver == "podman":
            config["volumes"] = ["%s:%s%s" % (m.source, m.target, ":ro" if m.read_only else "") for m in spec.mounts]
        else:
            config["mount"] = [{"type": "bind", "source": m.source, "target": m.target, "readonly": m.read_only}
                               for m in spec.mounts]
    return config


def _templates(plan: SessionPlan, service: str) -> t.List[t.Dict[str, t.Any]]:
    return [
        {"EmbeddedTmpl": _secret_template(plan, PRIVATE_KEY_ITEM), "DestPath": SECRETS_SUBDIR + "/id",
         "Perms": "0600", "ChangeMode": "noop"},
        {"EmbeddedTmpl": _secret_template(plan, PUBLIC_KEY_ITEM), "DestPath": SECRETS_SUBDIR + "/id.pub",
         "Perms": "0644", "ChangeMode": "noop"},
        {"EmbeddedTmpl": PEERS_TEMPLATE % service, "DestPath": LOCAL_SUBDIR + "/peers",
         "ChangeMode": "noop"},
        {"EmbeddedTmpl": '{{ env "NOMAD_META_%s" }}' % ENTRYPOINT_META_KEY, "DestPath": LOCAL_SUBDIR + "/entrypoint.sh", "Perms": "0755",
         "ChangeMode": "noop"},
    ]


def _group(plan: SessionPlan, container: Container, net: RenderedNetwork, key: t.Optional[bytes],
           namespace: str, templates: t.Sequence[t.Mapping[str, t.Any]], service: str) -> t.Dict[str, t.Any]:
    """One container's task group (``key``: the signing key of its agent, None: unsigned). Made once per job:
    ``templates`` (:func:`_templates`, copied per group) and ``service`` (:func:`service_name`)."""
    spec = plan.spec
    network: t.Dict[str, t.Any] = {"Mode": plan.network_mode, "Hostname": container.hostname,
                                   "CNI": {"Args": group_args(net, key, namespace, spec.name, container.hostname)}}
    if container.is_main:
        network["DynamicPorts"] = [{"Label": "ssh", "To": spec.ssh.port}] + [
            {"Label": p.label, "To": p.port} for p in spec.ports]
    resources: t.Dict[str, t.Any] = {"CPU": container.resources.cpu, "MemoryMB": container.resources.memory}
    if container.resources.gpu:
        resources["Devices"] = [{"Name": "nvidia/gpu", "Count": container.resources.gpu}]
    task: t.Dict[str, t.Any] = {
        "Name": TASK_NAME,
        "Driver": spec.driver,
        "Config": _driver_config(plan, container),
        "Env": _env(container),
        "Resources": resources,
        "Templates": [dict(x) for x in templates],
        "KillTimeout": 10 * SECOND,
    }
    if spec.secrets.backend == "vault":
        vault: t.Dict[str, t.Any] = {"ChangeMode": "noop"}
        if spec.secrets.role:
            vault["Role"] = spec.secrets.role
        task["Vault"] = vault
    return {
        "Name": container.hostname,
        "Count": 1,
        "Meta": {"BACKENDAI_CLUSTER_ROLE": container.role, "BACKENDAI_CLUSTER_IDX": str(container.idx),
                 "backendai_agent": container.agent},
        "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": container.agent, "Operand": "="}],
        "Networks": [network],
        "Services": [{"Name": service, "Provider": "nomad", "AddressMode": "alloc",
                      "PortLabel": str(spec.ssh.port), "Tags": [container.hostname, "role-" + container.role]}],
        # A container is pinned to its agent: restart in place a few times, never reschedule elsewhere.
        "RestartPolicy": {"Attempts": 2, "Interval": 300 * SECOND, "Delay": 5 * SECOND, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "Tasks": [task],
    }


#: Where the job's page in the Nomad UI points for what the cluster variables mean.
UI_LINK = {"Label": "Backend.AI cluster sessions", "URL": "https://docs.backend.ai/en/latest/concepts/networking.html"}


def job_ui(plan: SessionPlan) -> t.Dict[str, t.Any]:
    """The job's ``ui`` block: what the Nomad UI shows above the job (Markdown), and a link."""
    spec = plan.spec
    hosts = [c.hostname for c in plan.containers]
    shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
    agents = len({c.agent for c in plan.containers})
    where = ("the Nomad variable `nomad/jobs/%s`" % spec.name if spec.secrets.backend == "nomad-variables"
             else "Vault KV v2")
    text = ("Backend.AI cluster session: %d container%s (%s), %s on %d node%s, image `%s`. One task group per "
            "container, named by its hostname; `ssh sub1` works from main1 with the session keypair from %s."
            % (len(hosts), "" if len(hosts) == 1 else "s", shown, spec.cluster_mode, agents,
               "" if agents == 1 else "s", spec.image, where))
    return {"Description": text, "Links": [dict(UI_LINK)]}


def render_network(plan: SessionPlan, namespace: str = "", network: t.Optional[JobNetwork] = None) -> RenderedNetwork:
    """The session network of a PLACED plan (see ``_nomad.job_network``)."""
    return session_network(plan.session_id, plan.agents_used, namespace, plan.spec.name, network,
                           session_slots([c.agent for c in plan.containers]), plan.spec.underlay_encryption)


def render_job(plan: SessionPlan, namespace: str = "", region: str = "",
               network: t.Optional[JobNetwork] = None) -> t.Dict[str, t.Any]:
    """The bare Nomad job (the value of ``Job`` in a register request) for a PLACED plan.

    ``network``: the claimed slot, the agents' underlay addresses and the cluster key; without it
    (or without its key) the job is rendered unsigned, for reading only (``_nomad.job_network``).
    """
    if not plan.placed:
        raise PlanError("the session cannot be placed (PENDING): %s" % plan.reason)
    spec = plan.spec
    net = render_network(plan, namespace, network)
    keys = signing_keys(network, plan.agents_used)  # each group is signed for the agent it is pinned to
    service = service_name(spec.name)
    templates = _templates(plan, service)
    meta = dict(session_values(plan))
    meta[TF_WORKERS_META_KEY] = tf_workers_json(plan)
    meta[SSH_PORT_META_KEY] = str(spec.ssh.port)
    meta[ENTRYPOINT_META_KEY] = ENTRYPOINT
    meta[MANAGED_META_KEY] = spec.name
    meta["backendai_cluster_service"] = service
    meta["backendai_secrets_backend"] = spec.secrets.backend
    datacenters = sorted({c.datacenter for c in plan.containers})
    job: t.Dict[str, t.Any] = {
        "ID": spec.name,
        "Name": spec.name,
        "Type": "batch" if spec.command or any(r.command for r in spec.roles) else "service",
        "Datacenters": datacenters,
        "UI": job_ui(plan),
        "Meta": dict(sorted(meta.items())),
        # clients older than the minimum do not add Nomad's identity to CNI_ARGS: keep them out
        "Constraints": [dict(VERSION_CONSTRAINT)],
        "TaskGroups": [_group(plan, c, net, keys.get(c.agent), namespace, templates, service) for c in plan.containers],
    }
    if namespace:
        job["Namespace"] = namespace
    if region:
        job["Region"] = region
    return job


def register_request(job: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The body of ``PUT /v1/jobs``."""
    return {"Job": job}


def dumps(body: t.Any, pretty: bool = True) -> str:
    """Deterministic JSON text (pretty for files people read, minified for measuring)."""
    if pretty:
        return json.dumps(body, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    return json.dumps(body, separators=(",", ":"), sort_keys=False, ensure_ascii=False)
