#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: session_render
short_description: Render a Backend.AI-style cluster session into a Nomad job, without submitting it
version_added: 0.1.0
description:
  - Validates a cluster session spec, places its containers on the given agents, and renders the Nomad job
    as the JSON body of C(PUT /v1/jobs) and as an HCL2 jobspec for C(nomad job run), plus an OpenMPI hostfile.
  - Nothing is submitted and no key is generated; the job reads the session keypair at runtime from the secret
    backend, so the rendered files hold no secret.
  - "The job is B(not signed): every group's C(cni { args }) carries the marker C(BAI_MAC=UNSIGNED-RENDER-ONLY) instead
    of the MAC made with the cluster network key, so the agents' CNI plugin refuses to start it. Signing needs a
    network slot claimed in the cluster, which only M(backendai.cluster.session) does (it then signs with the real
    key). C(BAI_VNI)/C(BAI_NET) show the slot the session would try first; agents without C(underlay_ip) get a
    placeholder address from C(198.18.0.0/15); with live agents from Nomad they are the nodes' addresses, read as
    M(backendai.cluster.session) reads them."
  - With O(output_dir), writes C(<name>.json), C(<name>.nomad.hcl) and C(<name>.hostfile) there, only when their
    content changes.
  - Without O(agents), the agents are read (read-only) from the Nomad cluster at O(nomad_addr), as the
    M(backendai.cluster.session) module reads them.
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - backendai.cluster.attributes
  - backendai.cluster.attributes.actiongroup_nomad
  - backendai.cluster.nomad_connection
  - backendai.cluster.vault_connection
  - backendai.cluster.session_spec
  - backendai.cluster.session_network
attributes:
  check_mode:
    support: full
    details: In check mode no file is written; RV(ignore:changed) says whether a file would change.
  diff_mode:
    support: full
    details: Shows the change of the rendered job JSON file.
options:
  spec:
    description:
      - The session spec (what the collection's playbooks take as the variable C(session)); every key is below.
      - Validation rejects unknown keys and reports every problem at once, each naming its field path (for example
        C(session.resources.cpu)), the value given and what is allowed.
      - Without O(spec.roles) the session is C(main) x1 and C(sub) x(O(spec.cluster_size) - 1); hostnames are
        C(<role><idx>) (C(main1), C(sub1), C(sub2), ...), main1 always first.
    type: dict
    required: true
    aliases: [session]
  agents:
    description:
      - Agents (Nomad client nodes) with their free capacity, each C({name, cpu, memory, gpu, datacenter, drivers}).
      - C(cpu) is in MHz and C(memory) in MB; C(underlay_ip) (the agent's session network address) is shown in the
        job's C(BAI_AGENTS); other keys are ignored.
      - Required unless a Nomad address is given (O(nomad_addr) or E(NOMAD_ADDR)); then the default is the free
        capacity of the cluster's ready, eligible nodes.
    type: list
    elements: dict
  output_dir:
    description:
      - Directory to write the rendered files into. It is created if missing.
      - When omitted, nothing is written and the results are only returned.
    type: path
  formats:
    description: Which files to write into O(output_dir).
    type: list
    elements: str
    choices: [json, hcl, hostfile]
    default: [json, hcl, hostfile]
  session_id:
    description:
      - The session ID (C(BACKENDAI_SESSION_ID), also main1's kernel ID).
      - When omitted, a stable ID is derived from the session name, so that rendering is reproducible.
    type: str
  fail_on_pending:
    description: Fail when the session cannot be placed (C(PENDING)); the message gives the reason per agent.
    type: bool
    default: true
  write_secret:
    description:
      - For the Nomad CLI path - also make the session keypair and write it into O(output_dir) as a Nomad variable
        specification file, C(<name>.var.hcl) (what C(nomad var put -in hcl) reads) or C(<name>.var.json)
        (O(secret_format=json)), mode 0600; RV(commands) are then the two commands that run the session.
      - Without it the job's C(nomadVar) template finds no keypair at C(nomad/jobs/<name>) and C(nomad job run)
        waits for it; the M(backendai.cluster.session) module writes the variable itself.
      - An existing file is kept (same keys, same session ID); delete it to make new keys. The key is never in a
        result. Needs O(output_dir), the C(nomad-variables) secret backend and the cryptography library.
      - The job itself stays B(unsigned) (see above), so agents whose CNI plugin checks the session network signature
        refuse to start it. Use M(backendai.cluster.session) to run a session on such a cluster.
    type: bool
    default: false
  secret_format:
    description: Format of the variable specification file of O(write_secret).
    type: str
    choices: [hcl, json]
    default: hcl
notes:
  - Placement follows Backend.AI's rules; see the README section on placement.
  - O(namespace) and O(region) go into the rendered job.
  - The Vault and session network options are accepted so that one C(module_defaults) group serves every module; this
    module does not contact Vault, read the network key or claim a network slot.
seealso:
  - name: Nomad job HTTP API
    description: The register request body this module renders.
    link: https://developer.hashicorp.com/nomad/api-docs/jobs#create-job
  - name: nomad var put
    description: The command that stores the variable specification file of O(write_secret).
    link: https://developer.hashicorp.com/nomad/docs/commands/var/put
"""

EXAMPLES = r"""
- name: Render the example session into ./out
  backendai.cluster.session_render:
    spec:
      name: train-42
      image: python:3.11-slim
      command: [python, train.py]
      cluster_size: 4
      cluster_mode: multi-node
      resources: {cpu: 2000, memory: 8192}
    agents:
      - {name: agent-a, cpu: 8000, memory: 32768}
      - {name: agent-b, cpu: 8000, memory: 32768}
    output_dir: ./out

- name: Plan against the live free capacity of a Nomad cluster (read-only)
  backendai.cluster.session_render:
    spec: "{{ session }}"
    nomad_addr: https://nomad.example.com:4646
    output_dir: ./out

- name: Render for the Nomad CLI, with the keypair as a variable spec file (0600)
  backendai.cluster.session_render:
    spec: "{{ session }}"
    agents: "{{ agents }}"
    output_dir: ./out
    write_secret: true
  register: rendered

- name: Print the two commands (nomad var put, nomad job run)
  ansible.builtin.debug:
    msg: "{{ rendered.commands }}"

- name: Only compute the plan
  backendai.cluster.session_render:
    spec: "{{ session }}"
    agents: "{{ agents }}"
    fail_on_pending: false
  register: rendered
"""

RETURN = r"""
plan:
  description: The placement plan, without secrets.
  returned: always
  type: dict
  contains:
    name:
      description: Session name.
      type: str
      sample: train-42
    status:
      description: C(PLACED) or C(PENDING).
      type: str
      sample: PLACED
    reason:
      description: Why the plan is C(PENDING), per agent; empty when placed.
      type: str
      sample: ""
    session_id:
      description: C(BACKENDAI_SESSION_ID) the job carries.
      type: str
    mode:
      description: C(single-node) when every container is on one agent, else C(multi-node).
      type: str
      sample: single-node
    network_mode:
      description: Nomad network mode of every group, always C(cni/backendai).
      type: str
      sample: cni/backendai
    cluster_size:
      description: Number of containers.
      type: int
      sample: 3
    replicas:
      description: C(role:count) pairs (C(BACKENDAI_CLUSTER_REPLICAS)).
      type: str
      sample: main:1,sub:2
    agents:
      description: The agents the plan uses, in plan order.
      type: list
      elements: str
      sample: [agent-a]
    containers:
      description:
        - One entry per container in global order - C(hostname), C(role), C(idx), C(rank), C(local_rank), C(agent),
          C(datacenter), C(kernel_id), C(image), C(resources) (C(cpu), C(memory), C(gpu)).
      type: list
      elements: dict
job:
  description: 'The register request body (C({"Job": ...})) for C(PUT /v1/jobs); null when pending.'
  returned: always
  type: dict
network:
  description:
    - The session network of the rendered job - C(name), C(slot) (the one it would try first), C(vni), C(subnet),
      C(agents), C(mtu), C(signed) (always false here) and C(placeholder_agents) (agents given without C(underlay_ip)).
  returned: when placed
  type: dict
hcl:
  description: The same job as an HCL2 jobspec; empty when pending.
  returned: always
  type: str
hostfile:
  description: An OpenMPI hostfile for the session (C(main1 slots=1) lines).
  returned: always
  type: str
  sample: "main1 slots=1\nsub1 slots=1\n"
files:
  description: Paths of the files in O(output_dir) (written or already up to date).
  returned: when O(output_dir) is set
  type: list
  elements: str
secret_file:
  description: Path of the variable specification file holding the keypair (its content is never returned).
  returned: when O(write_secret=true) and the session is placed
  type: str
  sample: out/train-42.var.hcl
commands:
  description: The Nomad CLI commands that run the rendered session - C(nomad var put) of RV(secret_file), then
    C(nomad job run) of the HCL jobspec.
  returned: when O(write_secret=true) and the session is placed
  type: list
  elements: str
  sample: ["nomad var put @out/train-42.var.hcl", "nomad job run out/train-42.nomad.hcl"]
secret_path:
  description: The Nomad variable path the job reads its keypair from (C(nomad/jobs/<name>)).
  returned: when the session is placed and uses the nomad-variables secret backend
  type: str
  sample: nomad/jobs/train-42
"""

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.backend import refuse_all_namespaces
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, InputError, Problem
from ansible_collections.backendai.cluster.plugins.module_utils._files import ensure_file
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import JobNetwork
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import NETWORK, NOMAD, VAULT, ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import live_agents, underlay_addresses
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import var_file as _nomad_var_file
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import secret_path
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network import signed
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import render_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.view import plan_summary
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair, generate_keypair


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _secret_keypair(base: ClusterModule, p: t.Dict[str, t.Any]) -> t.Tuple[SSHKeypair, str]:
    """The keypair of O(write_secret): the one in an existing variable file, else a new one."""
    spec = parse_spec(p["spec"])
    if spec.secrets.backend != "nomad-variables":
        raise InputError("write_secret", [Problem(
            "session.secrets.backend", "write_secret writes a Nomad variable file, so it needs nomad-variables (the "
            "session module stores Vault keypairs)", spec.secrets.backend, True)])
    path = os.path.join(p["output_dir"], _nomad_var_file.file_name(spec.name, p["secret_format"]))
    found = _nomad_var_file.read_keypair(_read(path), p["secret_format"])
    if found is not None and found[0] == "nomad/jobs/%s" % spec.name:
        base.hide(found[1])
        return SSHKeypair(found[1], found[2]), path
    base.require("cryptography")
    return generate_keypair(spec.ssh.key_type, spec.ssh.key_bits or 3072), path


def main() -> None:
    base = ClusterModule(
        argument_spec=dict(
            spec=dict(type="dict", required=True, aliases=["session"]),
            agents=dict(type="list", elements="dict"),
            output_dir=dict(type="path"),
            formats=dict(type="list", elements="str", choices=["json", "hcl", "hostfile"],
                         default=["json", "hcl", "hostfile"]),
            session_id=dict(type="str"),
            fail_on_pending=dict(type="bool", default=True),
            write_secret=dict(type="bool", default=False),
            secret_format=dict(type="str", choices=["hcl", "json"], default="hcl"),
        ),
        shared=(NOMAD, VAULT, NETWORK),
        required_if=[("write_secret", True, ["output_dir"])],
    )
    module = base.module
    p = module.params
    try:
        refuse_all_namespaces(p["namespace"], "backendai.cluster.session_render")
    except BackendAIClusterError as exc:
        module.fail_json(msg=str(exc))
    agents = p["agents"]
    live = agents is None
    if live:
        if not base.nomad_address_given():
            module.fail_json(msg="agents is required unless a Nomad address is given (nomad_addr or NOMAD_ADDR)")
        try:
            agents = live_agents(base.nomad(), namespace=p["namespace"] or "default")
        except NomadError as exc:
            base.close()
            module.fail_json(msg="reading the agents from Nomad: %s" % exc, exception="")
    # unsigned on purpose: see the description (no slot is claimed here)
    underlay = {str(a.get("name")): str(a["underlay_ip"]) for a in agents if isinstance(a, dict) and a.get("underlay_ip")}
    try:
        keypair, secret_file = _secret_keypair(base, p) if p["write_secret"] else (None, "")
        rendered = render_session(p["spec"], agents, public_key=keypair.public_key if keypair else "",
                                  session_id=p["session_id"] or "",
                                  namespace=p["namespace"] or "", region=p["region"] or "",
                                  network=JobNetwork(underlay=underlay))
    except InputError as exc:
        module.fail_json(msg=str(exc), problems=[str(x) for x in exc.problems])
    except BackendAIClusterError as exc:
        module.fail_json(msg=str(exc))
    if live and rendered.plan.placed:  # the agents' real underlay addresses, as the session module reads them
        try:
            found = underlay_addresses(base.nomad(), rendered.plan.agents_used, agents)
            rendered = signed(rendered, JobNetwork(underlay={a: ip for a, (ip, _mtu) in found.items()},
                                                   underlay_mtu=min(mtu for _ip, mtu in found.values())),
                              p["namespace"] or "", p["region"] or "")
        except (NomadError, ValueError, BackendAIClusterError) as exc:
            module.warn("the agents' underlay addresses could not be read (%s); the job shows placeholders" % exc)
    base.close()
    plan = plan_summary(rendered.plan)
    result: t.Dict[str, t.Any] = dict(changed=False, plan=plan, job=None, hcl=rendered.hcl, hostfile=rendered.hostfile)
    if not rendered.plan.placed:
        if p["fail_on_pending"]:
            module.fail_json(msg="session %s is PENDING: %s" % (plan["name"], plan["reason"]), **result)
        module.exit_json(**result)
    result["job"] = {"Job": rendered.job}
    if rendered.plan.spec.secrets.backend == "nomad-variables":
        result["secret_path"] = secret_path(rendered.plan)
    result["network"] = rendered.network
    if p["output_dir"]:
        out = p["output_dir"]
        if not module.check_mode:
            os.makedirs(out, exist_ok=True)
        contents = {"json": (".json", rendered.job_json), "hcl": (".nomad.hcl", rendered.hcl),
                    "hostfile": (".hostfile", rendered.hostfile)}
        files = []
        for fmt in p["formats"]:
            suffix, content = contents[fmt]
            path = os.path.join(out, plan["name"] + suffix)
            before = _read(path) if fmt == "json" and module._diff else None
            if ensure_file(path, content, check_mode=module.check_mode):
                result["changed"] = True
                if before is not None:
                    result["diff"] = dict(before=before, after=content, before_header=path, after_header=path)
            files.append(path)
        result["files"] = files
    if keypair is not None:
        text = _nomad_var_file.render(result["secret_path"], p["namespace"] or "", keypair.private_key,
                                      keypair.public_key, p["secret_format"])
        base.hide(keypair.private_key)
        if ensure_file(secret_file, text, check_mode=module.check_mode, mode=0o600):
            result["changed"] = True
        result["secret_file"] = secret_file
        job_file = os.path.join(p["output_dir"], plan["name"] + (".nomad.hcl" if "hcl" in p["formats"] else ".json"))
        result["commands"] = ["nomad var put @%s" % secret_file,
                              "nomad job run %s%s" % ("" if job_file.endswith(".hcl") else "-json ", job_file)]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
