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
  - Nothing is submitted and nothing is written to Nomad; the job reads the session keypair at runtime from the secret
    backend, so the rendered job files hold no secret.
  - "For the Nomad CLI (O(write_secret=true)) with the cluster network key at hand (O(network_key_file)), the job is
    B(signed): every group's C(cni { args }) carries the MAC the agents' CNI plugin checks, made with the key over the
    job's namespace (always written into the job then), job ID and group name, for one session network slot - the
    session's preferred one or O(network_slot). The claim of that slot, the variable
    C(backendai-cluster/network/slots/<n>) in O(network_claims_namespace) exactly as M(backendai.cluster.session)
    writes it, is written beside the keypair as C(<name>.slot-<n>.var.hcl) (one per slot of a block), and
    RV(commands) put it with C(nomad var put -check-index=0) (create only if absent) before the keypair and the job.
    So is the session's agent table (its agents' underlay addresses and WireGuard public keys, once per session;
    every group's args carry only its digest): C(<name>.agents-<k>.var.hcl), variables
    C(backendai-cluster/network/agents/<n>/<digest>/<k>) in the same namespace, put after the claims.
    Signing needs every agent's real underlay address; an agent without one fails the task."
  - "Otherwise the job is B(not signed): its groups carry C(BAI_MAC=UNSIGNED-RENDER-ONLY) and the agents' CNI plugin
    refuses to start it (RV(unsigned_reason) says why); it is for reading. C(BAI_VNI)/C(BAI_NET) show the slot the
    session would try first (or O(network_slot)); agents without C(underlay_ip) get a placeholder address from
    C(198.18.0.0/15)."
  - With live agents from Nomad (no O(agents)), the underlay addresses are the nodes' addresses, read as
    M(backendai.cluster.session) reads them.
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
      - C(cpu) is in MHz and C(memory) in MB; C(underlay_ip) (the agent's session network address, required to sign)
        and C(underlay_mtu) (default 1500) go into the job's C(BAI_AGENTS) and C(BAI_MTU); other keys are ignored.
      - C(host_volumes) (each name mapped to C(read_only) true or false, or a list of names) are the host volumes the node declares;
        a session with mounts goes only to agents that declare every volume its mounts need (read-write unless every
        mount of it is read-only). Without it an agent is assumed to serve every volume; live node data carries it.
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
        (O(secret_format=json)), mode 0600; RV(commands) are then the commands that run the session and
        RV(teardown) the ones that remove it.
      - Without it the job's C(nomadVar) template finds no keypair at C(nomad/jobs/<name>) and C(nomad job run)
        waits for it; the M(backendai.cluster.session) module writes the variable itself.
      - An existing file is kept (same keys, same session ID); delete it to make new keys. The key is never in a
        result. Needs O(output_dir), the C(nomad-variables) secret backend and the cryptography library.
      - With the cluster network key the job is signed and the slot claim written too (see O(sign)); without it the job
        stays B(unsigned) and the agents refuse to start it.
    type: bool
    default: false
  sign:
    description:
      - Whether to sign the job for the session network (see the description). Needs O(write_secret=true).
      - When not set, the job is signed if O(write_secret=true) and the file O(network_key_file) exists; V(true) fails
        without a readable key, V(false) renders unsigned even with the key.
    type: bool
  network_slot:
    description:
      - The session network slot (VNI and subnet) the job is rendered for, from 0 to the number of slots - 1 (2048 with
        the default pool); a session larger than one slot's /24 takes an aligned block, so it must be a multiple of
        the block's size.
      - When not set, the session's preferred slot - the one M(backendai.cluster.session) tries first.
      - If C(nomad var put -check-index=0) of its claim fails, the slot is taken; render again with another one, or
        create the session with M(backendai.cluster.session), which picks a free slot.
    type: int
  secret_format:
    description: Format of the variable specification files of O(write_secret) (the keypair and the slot claims).
    type: str
    choices: [hcl, json]
    default: hcl
notes:
  - Placement follows Backend.AI's rules; see the user guide's Placement section.
  - O(namespace) and O(region) go into the rendered job.
  - The Vault options are accepted so that one C(module_defaults) group serves every module; this module does not
    contact Vault. It reads the network key only to sign (see O(sign)) and never claims a slot itself.
  - The key is never in a result, a file or a log; the claim files are not secret, but are written with mode 0600 like
    the keypair's file beside them.
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

- name: Print the commands (nomad var put of the slot claim and of the keypair, nomad job run)
  ansible.builtin.debug:
    msg: "{{ rendered.commands }}"

- name: Sign for network slot 12, with the key from another path
  backendai.cluster.session_render:
    spec: "{{ session }}"
    agents: "{{ agents }}"
    output_dir: ./out
    write_secret: true
    sign: true
    network_slot: 12
    network_key_file: /etc/backendai-cluster/network.key

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
    - The session network of the rendered job - C(name), C(slot) (the first slot of its block), C(slots), C(vni),
      C(subnet), C(agents), C(mtu), C(signed) and C(placeholder_agents) (agents given without C(underlay_ip)).
  returned: when placed
  type: dict
unsigned_reason:
  description: Why the job is not signed, and how to get a signed one.
  returned: when placed and the job is not signed
  type: str
  sample: "there is no cluster network key at /root/.config/backendai-cluster/network.key (network_key_file, ...)"
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
  description:
    - The Nomad CLI commands that run the rendered session, in order - when signed, C(nomad var put -check-index=0) of
      every RV(claim_files) (fails if the slot is taken) and C(nomad var put) of every RV(table_files), then
      C(nomad var put) of RV(secret_file), then C(nomad job run) of the HCL jobspec. Signed, every command names its
      namespace.
  returned: when O(write_secret=true) and the session is placed
  type: list
  elements: str
  sample: ["nomad var put -namespace=default -check-index=0 @out/train-42.slot-771.var.hcl",
           "nomad var put -namespace=default @out/train-42.var.hcl", "nomad job run out/train-42.nomad.hcl"]
teardown:
  description: The Nomad CLI commands that remove the session again - C(nomad job stop -purge), C(nomad var purge) of the
    agent table, of the slot claims (only purge claims this run did put) and of the keypair.
  returned: when O(write_secret=true) and the session is placed
  type: list
  elements: str
  sample: ["nomad job stop -namespace=default -purge train-42",
           "nomad var purge -namespace=default backendai-cluster/network/slots/771",
           "nomad var purge -namespace=default nomad/jobs/train-42"]
claim_files:
  description: Paths of the variable specification files of the signed job's slot claims, one per slot of its block.
  returned: when the job is signed
  type: list
  elements: str
  sample: [out/train-42.slot-771.var.hcl]
table_files:
  description: Paths of the variable specification files of the signed job's agent table (its agents' underlay
    addresses and WireGuard public keys, 1,024 agents a file), written in the claims namespace after the claims.
  returned: when the job is signed
  type: list
  elements: str
  sample: [out/train-42.agents-0.var.hcl]
secret_path:
  description: The Nomad variable path the job reads its keypair from (C(nomad/jobs/<name>)).
  returned: when the session is placed and uses the nomad-variables secret backend
  type: str
  sample: nomad/jobs/train-42
"""

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import NETWORK, NOMAD, VAULT, ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.render import render_files


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
            sign=dict(type="bool"),
            network_slot=dict(type="int"),
        ),
        shared=(NOMAD, VAULT, NETWORK),
        required_if=[("write_secret", True, ["output_dir"])],
    )
    base.run(render_files)


if __name__ == "__main__":
    main()
