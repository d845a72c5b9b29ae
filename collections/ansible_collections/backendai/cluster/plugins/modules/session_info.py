#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: session_info
short_description: Show Backend.AI-style cluster sessions, their containers and log tails
version_added: 0.1.0
description:
  - Returns one session (O(name)) or every session made by this collection - on Nomad, the jobs whose C(Meta) carries
    C(backendai_cluster_session); with the local backend, the sessions under O(state_dir).
  - "Per session: its state - C(PENDING) (job exists, some container has no allocation: Nomad could not place it yet),
    C(SCHEDULED) (allocations pending), C(RUNNING) (every container runs), C(DEGRADED) (some container failed, was lost
    or is restarting while others are up), C(TERMINATED) (stopped, or every container completed), C(ERROR) (every
    container is down and at least one failed)."
  - Per container - allocation status, node, address, restarts, exit code, and with O(log_lines) the end of its logs.
  - With O(namespace=*) (or E(NOMAD_NAMESPACE=*)) the sessions of every namespace are shown (each view names its
    C(namespace)); with O(name) as well, the sessions of that name in every namespace.
  - Read-only.
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - backendai.cluster.attributes
  - backendai.cluster.attributes.actiongroup_nomad
  - backendai.cluster.nomad_connection
  - backendai.cluster.vault_connection
  - backendai.cluster.local_runtime
  - backendai.cluster.session_network
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: N/A
    details: The module changes nothing.
options:
  name:
    description: The session to show. When omitted, every session made by this collection is shown.
    type: str
  backend:
    description:
      - Where the sessions run.
      - Defaults to V(nomad) when a Nomad address is given (O(nomad_addr) or E(NOMAD_ADDR)), else V(local).
    type: str
    choices: [nomad, local]
  log_lines:
    description:
      - How many lines of the end of each container's logs to return in C(log_tail), a list of lines (nomad - the last
        N lines of stdout followed by the last N lines of stderr). V(0) reads no logs.
    type: int
    default: 0
notes:
  - The Vault and session network options are accepted so that one C(module_defaults) group serves every module; this
    module does not contact Vault or read the network key.
requirements:
  - python-nomad (nomad backend)
seealso:
  - module: backendai.cluster.session
"""

EXAMPLES = r"""
- name: Every session on the Nomad cluster
  backendai.cluster.session_info:
    nomad_addr: https://nomad.example.com:4646
  register: all_sessions

- name: The sessions of every namespace
  backendai.cluster.session_info:
    namespace: "*"
  register: everywhere

- name: One session with the last 20 log lines of each container
  backendai.cluster.session_info:
    name: train-42
    log_lines: 20
  register: info

- name: Fail when a container has died
  ansible.builtin.assert:
    that: info.sessions[0].state == 'RUNNING'
    fail_msg: "{{ info.sessions[0].containers | selectattr('status', 'ne', 'running') | list }}"
"""

RETURN = r"""
sessions:
  description:
    - The session views (same shape as RV(backendai.cluster.session#module:session)); empty when O(name) is not a session.
  returned: always
  type: list
  elements: dict
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
      description: The Nomad job ID (equal to RV(sessions.name)).
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
      description: One of C(PENDING), C(SCHEDULED), C(RUNNING), C(DEGRADED), C(TERMINATED), C(ERROR).
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
        none is.
      type: str
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
          description: How often Nomad restarted its task (always 0 locally).
          type: int
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
"""

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.backends import session_backend
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import LOCAL, NETWORK, NOMAD, VAULT, ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure


def run(module: ClusterModule) -> t.Dict[str, t.Any]:
    p = module.params
    if p["log_lines"] < 0:
        raise ModuleFailure("log_lines must be 0 or more")
    sessions = session_backend(module).info(name=p["name"], log_lines=p["log_lines"])
    return {"changed": False, "sessions": sessions}


def main() -> None:
    module = ClusterModule(
        argument_spec=dict(
            name=dict(type="str"),
            backend=dict(type="str", choices=["nomad", "local"]),
            log_lines=dict(type="int", default=0),
        ),
        shared=(NOMAD, VAULT, LOCAL, NETWORK),
    )
    module.run(run)


if __name__ == "__main__":
    main()
