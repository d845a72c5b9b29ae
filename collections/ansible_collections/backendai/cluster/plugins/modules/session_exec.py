#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: session_exec
short_description: Run a command in every container of a Backend.AI-style cluster session, or a selection, in parallel
version_added: 0.3.0
description:
  - Runs one command in every container of session O(name), or in those O(hostnames) and O(roles) select, all at once,
    as the session user (V(work) by default) or root, and returns per container its output, exit code and time.
  - "Local backend: one C(runc exec) per container through the runtime podman runs it with, with the container's own
    process spec as podman's exec makes it (C(podman exec) where the runtime is not runc): the command gets the
    container's namespaces, cgroup limits, capabilities and environment, in the user's home."
  - "Nomad: through what reaches a session from outside today, and nothing else - one C(ssh) to main1's published
    ssh port as the session user, with the session keypair read from where the job keeps it (Nomad Variables or
    Vault) and main1's host key checked against it; from main1 the command runs in the others by C(ssh <hostname>)
    over the session network, with the keys the containers already hold. The key is written to a private file of
    mode 0600 for the ssh client only, removed afterwards, and masked in every result and log line."
  - A container's result is V(ok) (exit code 0), V(failed) (another exit code), V(timed_out) (still running after
    O(command_timeout)), V(unreachable) (it could not be run in, with the reason) or V(not_running) (the container is
    not running, so nothing ran in it). O(fail_on) decides whether the task fails; the results of every container
    are returned either way.
  - The module reports V(changed) whenever the command ran somewhere (use C(changed_when) for read-only commands).
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
    support: partial
    details: The session and the selection are read and checked; nothing runs (each selected container is V(skipped)).
  diff_mode:
    support: none
options:
  name:
    description: The session to run the command in.
    type: str
    required: true
  command:
    description:
      - The command line, run by C(sh -c) (local) or the session user's login shell (nomad, through ssh).
      - Exactly one of O(command) and O(argv) is required.
    type: str
  argv:
    description:
      - The program and its arguments, run without a shell (on Nomad they are quoted for the remote shell).
      - Exactly one of O(command) and O(argv) is required.
    type: list
    elements: str
  hostnames:
    description:
      - Run in these containers (V(main1), V(sub1), ...). A hostname the session does not have is an error.
      - A container is selected when its hostname is in O(hostnames) or its role in O(roles); with neither, every
        container is.
    type: list
    elements: str
    default: []
  roles:
    description: Run in the containers of these roles (see O(hostnames)).
    type: list
    elements: str
    choices: [main, sub]
    default: []
  user:
    description:
      - V(session) runs the command as the session's user (the spec's C(user), V(work) by default), as logins and
        the batch command run; V(root) as root.
      - On Nomad V(root) is refused unless the session's user is root - the containers' sshd admit only the session
        user (C(PermitRootLogin no)), and this module opens no other way in.
    type: str
    choices: [session, root]
    default: session
  fail_on:
    description:
      - When the task fails - V(any) container's result is not V(ok), V(all) of them are not, or V(none) (never; read
        RV(failed_hostnames)).
    type: str
    choices: [any, all, none]
    default: any
  command_timeout:
    description:
      - Seconds after which a container's command that still runs is reported V(timed_out) and its client is killed
        (local - its C(runc exec) or C(podman exec); nomad - its C(ssh) or shell on main1). V(0) waits as long as it takes.
      - The command itself may go on in the container (the engine and sshd do not always stop it).
    type: float
    default: 0
  backend:
    description:
      - Where the session runs.
      - Defaults to V(nomad) when a Nomad address is given (O(nomad_addr) or E(NOMAD_ADDR)), else V(local).
    type: str
    choices: [nomad, local]
notes:
  - On Nomad the Nomad token needs C(read-job) on the session's namespace and read on the keypair (the variable
    C(nomad/jobs/<name>), or the Vault secret with O(vault_token)); the controller needs the OpenSSH client and a
    route to main1's published port, as a user's C(ssh) does.
  - On Nomad an exit code of 255 may also mean that main1 could not reach the container by ssh (OpenSSH's code for
    its own failures); its C(stderr) then says why.
  - The session network options are accepted so that one C(module_defaults) group serves every module; this module
    does not read the network key.
requirements:
  - python-nomad (nomad backend)
  - the OpenSSH client (nomad backend)
seealso:
  - module: backendai.cluster.session
  - module: backendai.cluster.session_info
"""

EXAMPLES = r"""
- name: Which GPU processes run in every container
  backendai.cluster.session_exec:
    name: train-42
    command: nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  register: gpus
  changed_when: false

- name: Install a package in the sub containers, as root (local backend)
  backendai.cluster.session_exec:
    name: train-42
    roles: [sub]
    user: root
    argv: [apt-get, install, -y, htop]

- name: Look for a file, reporting where it is missing without failing
  backendai.cluster.session_exec:
    name: train-42
    command: test -e /home/work/checkpoint.pt
    fail_on: none
  register: found
  changed_when: false

- name: Show where it is missing
  ansible.builtin.debug:
    msg: "missing in {{ found.failed_hostnames }}"
"""

RETURN = r"""
session:
  description: The session's name.
  returned: always
  type: str
  sample: train-42
backend:
  description: The backend the session runs on.
  returned: always
  type: str
  sample: local
time:
  description: Seconds from the first command's start to the last one's end, as the controller saw it.
  returned: always
  type: float
  sample: 0.412
failed_hostnames:
  description: The selected containers whose result is not V(ok), in the session's order.
  returned: always
  type: list
  elements: str
  sample: [sub3]
containers:
  description: One result per selected container, in the session's order (main1, sub1, ...).
  returned: always
  type: list
  elements: dict
  contains:
    hostname:
      description: The container's hostname.
      type: str
      sample: sub1
    role:
      description: Its role, V(main) or V(sub).
      type: str
      sample: sub
    user:
      description: Who the command ran as, V(session) or V(root) (O(user)).
      type: str
      sample: session
    result:
      description: V(ok), V(failed), V(timed_out), V(unreachable), V(not_running) or V(skipped) (check mode).
      type: str
      sample: ok
    exit_code:
      description: The command's exit code; null when it did not end by itself (timed out, not run).
      type: int
      sample: 0
    stdout:
      description: What the command wrote to its standard output.
      type: str
      sample: "sub1\n"
    stderr:
      description: What it wrote to its standard error.
      type: str
      sample: ""
    time:
      description: Seconds the command took in this container (on Nomad measured on main1, to 10 ms).
      type: float
      sample: 0.105
    reason:
      description: Why the result is not V(ok) (empty when it is).
      type: str
      sample: the command exited 3
"""

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.session_exec import run_module


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
