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
    or is restarting while others are up), C(RESTARTING) (its failure policy brings the commands back), C(TERMINATED)
    (every container completed), C(ERROR) (every container is down and at least one failed), C(STOPPED) (stopped by
    the session module's O(backendai.cluster.session#module:state=stopped), or a Nomad job stop, to be started again)."
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
    - The session views; empty when O(name) is not a session.
    - Each is the view M(backendai.cluster.session) returns, key for key (the same code makes both), and is
      documented once, there - see RV(backendai.cluster.session#module:session) (C(ansible-doc backendai.cluster.session)).
  returned: always
  type: list
  elements: dict
  sample:
    - {name: train-42, backend: nomad, job_id: train-42, namespace: default, state: RUNNING, mode: single-node,
       session_id: 7bafe703-36bd-5351-a57d-5ce79d8bb7b2, containers: [{hostname: main1, status: running}]}
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
