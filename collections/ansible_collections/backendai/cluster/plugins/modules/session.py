#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: session
short_description: Create, update or remove a Backend.AI-style cluster compute session on Nomad or on this machine
version_added: 0.1.0
description:
  - Makes a cluster session from a declarative spec - containers that share a private network, know each other by
    name (C(main1), C(sub1), ...), carry the environment variables distributed frameworks read, and can C(ssh) into
    each other without setup.
  - "With O(backend=nomad): places the containers on the free capacity of the ready, eligible Nomad client nodes
    (or on O(agents)), generates the session's SSH keypair, writes it to Nomad Variables (C(nomad/jobs/<name>)) or
    Vault KV v2 with check-and-set C(cas=0) B(before) registering the job, claims a session network slot (a VNI and a
    subnet unique in the cluster, C(backendai-cluster/network/slots/<n>) in O(network_claims_namespace), also with
    C(cas=0)), writes the session's agent table beside it (its agents' underlay addresses and WireGuard public keys,
    once per session: C(backendai-cluster/network/agents/<n>/...)), registers the job with every group on the
    C(cni/backendai) network and its network parameters signed with the cluster key (O(network_key_file)) over the
    table's digest, and optionally waits until every container runs."
  - Nothing on the agents is touched - they were prepared once by the role C(backendai.cluster.overlay_agent).
  - If a step after the keypair is written fails (slot claim, job registration, waiting), the session is rolled back -
    the job is deregistered and purged, the network slot released and the secret deleted - and the error names the
    failed step. O(state=absent) removes the same three.
  - "All or nothing: placing and registering happen under a cluster-wide admission lock (a Nomad variable lock on
    C(backendai-cluster/admission) in the C(default) namespace, TTL 15 s; a killed holder keeps it 2 x TTL + 1 s, about
    31 s; waiters queue under C(backendai-cluster/admission-queue/) and block on Nomad, so the token needs read, list,
    write and destroy there too, and read on the lock). The holder places the creates queued behind it with its own
    (batch admission: each publishes only its resources and placement constraints, and registers its own job), and the
    job's evaluation is followed; if
    Nomad cannot place some container (capacity taken by another job), the new session is rolled back at once and,
    with O(wait_for_resources), placed again on fresh capacity, else the error gives Nomad's reason per container."
  - A session with a failed or lost container (C(DEGRADED), C(ERROR)) is brought back by O(state=present) with the
    same keys and session ID (on Nomad each broken container gets a new allocation; locally the session is recreated).
  - Idempotent. For an existing session the keys are never regenerated; the job is re-rendered with the stored
    public key's session ID and Nomad's job plan decides whether anything changed. That plan is read-only and takes no
    lock - an unchanged session writes nothing to Nomad and does not wait for the admission lock.
  - With O(backend=local), the session runs on this machine (see the local runtime); the result has the same shape.
  - The private key, the cluster network key and tokens never appear in results, diffs or logs.
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - backendai.cluster.attributes
  - backendai.cluster.attributes.actiongroup_nomad
  - backendai.cluster.nomad_connection
  - backendai.cluster.vault_connection
  - backendai.cluster.local_runtime
  - backendai.cluster.session_spec
  - backendai.cluster.session_network
attributes:
  check_mode:
    support: full
    details:
      - Nothing is written anywhere (no key, variable, secret or job). For an existing session the job plan endpoint
        (a read-only dry run) tells whether the job would change.
      - For a new session the session ID in the result is a placeholder (the real one derives from the key made at
        creation).
  diff_mode:
    support: full
    details:
      - New session - the rendered job (secret-free).
      - Changed session - the job fields that change, from Nomad's plan.
      - Removed session - the job and where its keypair was. Never key material.
options:
  state:
    description:
      - V(present) creates the session or updates it to match O(spec); V(absent) stops and removes it.
      - V(stopped) stops a session to start it again later, giving its CPU, memory and GPUs back - its containers (and
        locally their network namespaces and network) go, its identity stays - the SSH keypair (in the secret store,
        or the local O(state_dir)), hence the session ID, and its names. V(present) with the same spec starts it again,
        placed as before where capacity allows (on Nomad the job is stopped without purge and registered again;
        its network slot is released on stop and claimed again on start). A stopped session's state is C(STOPPED).
        Stopping a session that does not exist fails; one that is stopped already is unchanged.
    type: str
    choices: [present, absent, stopped]
    default: present
  backend:
    description:
      - Where the session runs.
      - Defaults to V(nomad) when a Nomad address is given (O(nomad_addr) or E(NOMAD_ADDR)), else V(local).
    type: str
    choices: [nomad, local]
  spec:
    description:
      - The session spec (what the collection's playbooks take as the variable C(session)); every key is below.
      - Validation rejects unknown keys and reports every problem at once, each naming its field path (for example
        C(session.resources.cpu)), the value given and what is allowed.
      - Without O(spec.roles) the session is C(main) x1 and C(sub) x(O(spec.cluster_size) - 1); hostnames are
        C(<role><idx>) (C(main1), C(sub1), C(sub2), ...), main1 always first.
      - Required with O(state=present). With O(state=absent) or O(state=stopped), O(spec) or O(name) names the session.
    type: dict
    aliases: [session]
  name:
    description:
      - The session name (the Nomad job ID), for O(state=absent) or O(state=stopped) without a spec.
      - With a spec, it must equal C(spec.name).
    type: str
  agents:
    description:
      - Agents with their B(free) capacity, each C({name, cpu, memory, gpu, datacenter, drivers}) (CPU in MHz,
        memory in MB, GPU devices); extra keys are ignored.
      - For the nomad backend an agent may also give C(underlay_ip) and C(underlay_mtu), its address and MTU for the
        session network; the default is the Nomad node's meta C(backendai.underlay_ip) / C(backendai.underlay_mtu), else
        its C(Address) and 1500.
      - C(host_volumes) (each name mapped to C(read_only) true or false, or a list of names) are the host volumes the node declares;
        a session with mounts goes only to agents that declare every volume its mounts need (read-write unless every
        mount of it is read-only). Without it an agent is assumed to serve every volume; live node data carries it.
      - For the nomad backend the default is live node data - every ready, eligible, non-draining client node of the
        C(default) node pool, with its free capacity as the C(backendai.cluster.nomad_nodes) inventory plugin computes
        it (for an existing session its own allocations count as free).
      - The inventory plugin puts that same mapping into each host's C(backendai_agent) variable, so the same list can
        be built from C(hostvars) (see the examples).
      - For the local backend the default is this machine as one agent, C(local). Given, they must be local agents
        (network namespaces of this machine made by M(backendai.cluster.local_agents) or C(playbooks/local_agents.yml),
        each with its C(local) mapping); a multi-node session is then spread over them like over Nomad nodes, joined
        by a VXLAN overlay network.
    type: list
    elements: dict
  wait:
    description:
      - Wait until every container's allocation is running (a container of a batch session may also have completed).
      - When a new session does not get there within O(wait_timeout), it is rolled back.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for the containers when O(wait=true).
    type: int
    default: 300
  wait_for_resources:
    description:
      - When the session cannot be placed (C(PENDING)), retry placement against fresh node data every two seconds for
        up to this many seconds before failing. V(0) fails at once with the reason.
      - Has no effect with an explicit O(agents) list.
    type: int
    default: 0
  keep_logs:
    description: With O(state=absent) and the local backend, keep the containers' logs in O(state_dir).
    type: bool
    default: false
requirements:
  - python-nomad (nomad backend)
  - cryptography (to generate the session keypair)
  - hvac (when the spec stores the keypair in Vault)
notes:
  - The job's tasks read the keypair at runtime from the secret backend; it is never in the job, its Env or its Meta.
  - Changing C(spec.secrets) of an existing session is refused; remove the session and create it again.
  - Updating an existing session is not rolled back on failure (it existed before); the error says what happened.
seealso:
  - module: backendai.cluster.session_info
  - module: backendai.cluster.session_render
  - plugin: backendai.cluster.nomad_nodes
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: Run a four-container training session on Nomad
  backendai.cluster.session:
    nomad_addr: https://nomad.example.com:4646
    ca_cert: /etc/nomad.d/ca.pem
    spec:
      name: train-42
      image: registry.example.com/pytorch-sshd:2.3
      command: [torchrun, --nnodes=4, train.py]
      cluster_size: 4
      cluster_mode: multi-node
      resources: {cpu: 2000, memory: 8192, gpu: 1}
    wait_timeout: 600
  register: created

- name: Show how to reach main1
  ansible.builtin.debug:
    msg: "{{ created.session.main1.ssh_command }}"

- name: Create the session, waiting up to 10 minutes for free capacity
  backendai.cluster.session:
    spec: "{{ session }}"
    wait_for_resources: 600

- name: Place on agents from the nomad_nodes inventory instead of live data
  backendai.cluster.session:
    spec: "{{ session }}"
    agents: "{{ groups['agents'] | map('extract', hostvars, 'backendai_agent') | list }}"

- name: Same connection options for every module of the collection
  module_defaults:
    group/backendai.cluster.nomad:
      nomad_addr: "{{ nomad_addr }}"
      token: "{{ nomad_token }}"
  block:
    - name: Remove the session (job purged, keypair deleted)
      backendai.cluster.session:
        name: train-42
        state: absent

- name: Stop a session for a while (capacity back, keys and session ID kept); state=present starts it again
  backendai.cluster.session:
    name: train-42
    state: stopped

- name: A session on this machine (local backend)
  backendai.cluster.session:
    backend: local
    spec: "{{ session }}"
"""

RETURN = r"""
session:
  description:
    - The session view, the same shape for both backends (keys marked as one backend's are only in its views).
    - After O(state=absent), the view of the removed session (nomad - C(TERMINATED) or null when there was none;
      local - its last status). After O(state=stopped), the stopped session (state C(STOPPED)). In check mode for a
      new session, the planned view (state C(PENDING)) on the local backend and null on the nomad backend.
  returned: success
  type: dict
  contains:
    name:
      description: Session name (the Nomad job ID).
      type: str
      sample: train-42
    backend:
      description: V(nomad) or V(local).
      type: str
      sample: nomad
    job_id:
      description: The Nomad job ID (equal to RV(session.name)).
      type: str
      returned: nomad backend
    namespace:
      description: The Nomad namespace of the job.
      type: str
      returned: nomad backend
      sample: default
    session_id:
      description: C(BACKENDAI_SESSION_ID), also main1's kernel ID.
      type: str
      sample: 7bafe703-36bd-5351-a57d-5ce79d8bb7b2
    state:
      description: One of C(PENDING), C(SCHEDULED), C(RUNNING), C(DEGRADED), C(RESTARTING) (the failure policy brings
        the commands back), C(TERMINATED), C(ERROR), C(STOPPED) (after O(state=stopped); O(state=present) starts it again).
      type: str
      sample: RUNNING
    mode:
      description: C(single-node) (one agent) or C(multi-node).
      type: str
      sample: single-node
    network_mode:
      description: Always C(cni/backendai) - the session's own network on every agent's one static CNI network.
      type: str
      sample: cni/backendai
    underlay_encryption:
      description:
        - How the session's VXLAN crosses the underlay between its agents - C(wireguard) (inside WireGuard), C(none)
          (as it is - the spec's network.underlay_encryption none, a session on one agent, or a job of an earlier release).
        - Nomad - from the job's C(BAI_ENC); empty when the job carries no session network args.
      type: str
      sample: wireguard
    state_dir:
      description: The local session's state directory (logs, C(ssh_config)); empty before it exists.
      type: str
      returned: local backend
    secret:
      description: Where the keypair lives (backend, path, item names); never the key.
      type: dict
      returned: nomad backend, when the secret was looked up
    reason:
      description: Which containers are broken and why, one line (what C(DEGRADED) or C(ERROR) means here); empty when
        none is. When the failure policy ended the session, its first failure (container, exit code, reason).
      type: str
    failure:
      description:
        - The session's failure policy as its containers apply it (the spec's C(failure); see docs/failure-policy.md).
      type: dict
      returned: when the session has a failure policy and a supervisor's status could be read
      contains:
        policy:
          description: C(fail), C(restart_all) or C(restart_one).
          type: str
          returned: under a failure policy
        state:
          description: C(running), C(restarting), C(failed) (the policy ended the session) or C(gave_up) (max_restarts
            within the window were spent).
          type: str
          returned: under a failure policy
        restarts:
          description: The gang's restarts (C(restart_all)), or the most any container restarted (C(restart_one)).
          type: int
          returned: under a failure policy
        first_failure:
          description: The failure that ended the session (C(host), C(exit_code) or null, C(reason), C(time) in
            seconds since the epoch); null while it runs.
          type: dict
          returned: under a failure policy
    containers:
      description: One entry per container, main1 first.
      type: list
      elements: dict
      contains:
        hostname:
          description: The container's hostname (C(main1), C(sub1), ...), also its task group name on Nomad.
          type: str
        role:
          description: Its cluster role (C(main), C(sub), or a role of the spec).
          type: str
        idx:
          description: Its one-based index within the role.
          type: int
        agent:
          description: The agent (Nomad node name, or C(local) / a local agent) it runs on.
          type: str
        address:
          description: Its address on the session network (empty until known).
          type: str
        status:
          description:
            - Nomad's client status (C(pending), C(running), C(complete), C(failed), C(lost)), C(restarting) or
              C(unplaced); the local backend uses the same job model (C(running), C(complete), C(failed)) and
              C(planned) (check mode).
          type: str
        reason:
          description: Why the container is not running as it should (Nomad's words, or the local runtime's); empty
            when it is fine.
          type: str
        exit_code:
          description: Exit code of its command once it ended, else null.
          type: int
        restarts:
          description: How often Nomad restarted its task; under a failure policy, how often the policy restarted its
            command (the gang's generation under C(restart_all)).
          type: int
        last_failure:
          description: The last failure its supervisor saw in the session (C(host), C(exit_code) or null, C(reason),
            C(time)).
          type: dict
          returned: under a failure policy, once there was one
        alloc_id:
          description: Its current Nomad allocation ID.
          type: str
          returned: nomad backend
        node_id:
          description: The Nomad node ID of its allocation.
          type: str
          returned: nomad backend
        command:
          description: Where its command stands - C(running), C(exited), C(killed), or C(none) (an interactive
            container); null in check mode.
          type: str
          returned: local backend
        log:
          description: Path of its log file.
          type: str
          returned: local backend
        log_tail:
          description: The last lines of its log (with O(backendai.cluster.session_info#module:log_lines); the local
            backend always returns the list).
          type: list
          elements: str
          returned: when logs were read
    main1:
      description: How to reach main1. Log in with the session's private key (kept in the secret backend, or in the
        local state directory).
      type: dict
      sample: {address: 10.0.0.10, ssh_port: 23456, ssh_command: ssh -p 23456 work@10.0.0.10}
      contains:
        hostname:
          description: main1's hostname.
          type: str
          returned: nomad backend
        address:
          description: Address main1's published ports are on (the node's on Nomad, C(127.0.0.1) locally).
          type: str
        ssh_port:
          description: The published sshd port (null until known).
          type: int
        ssh_command:
          description: The command that opens a shell in main1 as the session user (C(ssh -F <state_dir>/ssh_config main1) locally).
          type: str
        ports:
          description: Every published port by label - C({address, port, to}).
          type: dict
          returned: nomad backend
    progress:
      description:
        - Where a wait for the containers stands - C(done) (every container runs; a finished batch container counts),
          C(running) and C(total) (counts), C(waiting) (hostnames not running yet), C(failed) (hostnames that stopped
          for good), and C(summary), one line such as C(1 of 3 containers running; waiting for sub1 (pending on n1)).
        - The collection's create_session playbook prints C(summary) at each poll while it waits.
      type: dict
      sample: {done: false, running: 1, total: 2, waiting: [sub1], failed: [],
               summary: "1 of 2 containers running; waiting for sub1 (pending on n1)"}
created:
  description:
    - Whether this run made a new session (false for an update, an unchanged session, check mode and O(state=absent)).
    - With O(wait=false) a playbook that then waits itself can tell whether a failed wait should remove the session
      (as playbooks/create_session.yml does - a session it created is rolled back, an existing one is left as it is).
  returned: success and O(state=present)
  type: bool
plan:
  description:
    - The placement plan (secret-free), as M(backendai.cluster.session_render) returns it, key for key (the same code
      makes both), and documented once, there - see RV(backendai.cluster.session_render#module:plan).
  returned: success and O(state=present)
  type: dict
  sample: {name: train-42, status: PLACED, reason: "", mode: single-node, network_mode: cni/backendai, cluster_size: 3}
job:
  description: 'The register request body (C({"Job": ...})) of the rendered job; it holds no secret.'
  returned: success, O(state=present), nomad backend
  type: dict
changes:
  description: The job fields that change (from Nomad's plan), one line each; empty when unchanged.
  returned: success, O(state=present), nomad backend
  type: list
  elements: str
  sample: ["TaskGroups[main1].Tasks[kernel].Env[FOO]: bar -> baz"]
secret:
  description: Where the keypair lives (backend, path, mount, item names); never the key.
  returned: success, O(state=present), nomad backend
  type: dict
  sample: {backend: nomad-variables, path: nomad/jobs/train-42, private_key_item: ssh_private_key,
           public_key_item: ssh_public_key}
network:
  description:
    - The session's network - C(name) (C(backendai)), C(slot), C(vni), C(subnet), C(agents) (underlay addresses in
      plan order), C(mtu), C(signed) (always true once submitted) and C(placeholder_agents). Never the key.
  returned: success, O(state=present), nomad backend
  type: dict
  sample: {name: backendai, slot: 771, vni: 66307, subnet: 10.203.3.0/24, agents: [10.0.0.10, 10.0.0.11], mtu: 1450,
           signed: true, placeholder_agents: []}
removed:
  description:
    - What O(state=absent) removed (or would remove) - C(job) (bool), C(secrets) (descriptions) and C(network_slot)
      (the released slot, or null).
  returned: O(state=absent), nomad backend
  type: dict
failed_step:
  description: The step that failed (C(write keypair secret), C(claim network slot), C(register job), C(wait for containers)).
  returned: on failure after placement
  type: str
rollback:
  description: What was rolled back after a failed creation.
  returned: on failure of a creation
  type: str
"""

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.backends import session_backend
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import LOCAL, NETWORK, NOMAD, VAULT, ClusterModule


def run(module: ClusterModule) -> t.Dict[str, t.Any]:
    p = module.params
    backend = session_backend(module, changes=True)
    if p["state"] == "present":
        return backend.present(p["spec"], agents=p["agents"], check_mode=module.check_mode, diff=module.diff_mode,
                               wait=p["wait"], wait_timeout=float(p["wait_timeout"]),
                               wait_for_resources=float(p["wait_for_resources"]))
    if p["state"] == "stopped":
        return backend.stop(name=p["name"], spec_raw=p["spec"], check_mode=module.check_mode, diff=module.diff_mode)
    return backend.absent(name=p["name"], spec_raw=p["spec"], check_mode=module.check_mode, diff=module.diff_mode,
                          keep_logs=p["keep_logs"])


def main() -> None:
    module = ClusterModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent", "stopped"], default="present"),
            backend=dict(type="str", choices=["nomad", "local"]),
            spec=dict(type="dict", aliases=["session"]),
            name=dict(type="str"),
            agents=dict(type="list", elements="dict"),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=300),
            wait_for_resources=dict(type="int", default=0),
            keep_logs=dict(type="bool", default=False),
        ),
        shared=(NOMAD, VAULT, LOCAL, NETWORK),
        required_if=[("state", "present", ["spec"]), ("state", "absent", ["name", "spec"], True),
                     ("state", "stopped", ["name", "spec"], True)],
    )
    module.run(run)


if __name__ == "__main__":
    main()
