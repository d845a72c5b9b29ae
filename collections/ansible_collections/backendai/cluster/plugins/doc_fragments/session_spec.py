# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the session spec: the suboptions of the modules' option ``spec``.

Keys, types, defaults and choices must equal ``SCHEMA`` in plugins/module_utils/_session/schema.py, the schema
the validator reads; tests/unit/plugins/doc_fragments/test_session_spec_doc.py fails when they drift.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  spec:
    suboptions:
      name:
        description:
          - Session name, also the Nomad job ID - 1 to 64 letters, digits, C(-) or C(_).
        type: str
        required: true
      image:
        description:
          - Container image of every container (of every role that does not set its own). On Nomad any image of the
            agent's architecture works, even one with no shell and no libc (distroless) - its own C(sshd), C(ssh) and
            C(setpriv) if it has them, else those of the session runtime bundle that the overlay_agent role installs
            on every agent and the job mounts read-only at C(/opt/backendai-runtime), whose busybox C(sh) runs the
            entrypoint.
          - The local backend does not pull it (there is no container engine); it runs the host's binaries.
        type: str
        required: true
      driver:
        description: Nomad task driver of every container.
        type: str
        choices: [docker, podman]
        default: docker
      command:
        description:
          - Argv run in every container (for example V([python, train.py])), after sshd is started.
          - Omitted, the session is interactive - the containers run sshd only.
        type: list
        elements: str
      cluster_size:
        description:
          - Containers in total, main1 included, 1 to 4096. V(1) is a normal (non-cluster) session.
          - With O(spec.roles) it may be omitted; given, it must equal the sum of the roles' replicas.
        type: int
        default: 1
      cluster_mode:
        description:
          - V(single-node) puts every container on one agent (the plan is C(PENDING) when none can hold them all).
          - V(multi-node) puts them on one agent if one can hold them all, else spreads them over agents, all or
            nothing; the containers are then joined by a private network across agents.
        type: str
        choices: [single-node, multi-node]
        default: single-node
      resources:
        description: Resources of B(each) container (not of the session).
        type: dict
        suboptions:
          cpu:
            description: CPU in MHz, at least 1.
            type: int
            default: 1000
          memory:
            description: Memory in MB, at least 1.
            type: int
            default: 1024
          gpu:
            description: GPU devices (Nomad C(device "nvidia/gpu")), at least 0.
            type: int
            default: 0
      mounts:
        description:
          - Host directories mounted in every container.
          - On Nomad each mount is a Nomad host volume (C(volume) in the group, C(volume_mount) in the task), never a
            docker bind mount, so the docker driver's C(volumes) stays disabled. The volume is named after the source
            (C(backendai-<slug>-<8 hex of sha256(source)>)) and must be declared on the clients, e.g. by the
            C(backendai.cluster.overlay_agent) role's C(overlay_agent_data_roots); a client without it is not used for
            the group. Nomad's C(volume_mount) has no sub-path, so the source is a whole declared data root.
          - On the local backend the source must lie under one of its C(mount_roots) (the option of that name).
        type: list
        elements: dict
        suboptions:
          source:
            description:
              - Absolute host path, without C(..).
              - Never the session network's key, code or state, the CNI plugins, or the Nomad client's data, below
                them or a directory above them (C(/etc/backendai-cluster), C(/usr/lib/backendai-cluster),
                C(/run/backendai-cluster), C(/run/backendai-cluster-mounts), C(/opt/cni), C(/usr/lib/cni), C(/etc/cni),
                C(/opt/nomad), C(/var/lib/nomad), C(~/.config/backendai-cluster), C(~/.local/state/backendai-cluster) in
                any home; so neither C(/), C(/etc), C(/run), C(/var), C(/home) nor a home). A path through
                C(/var/run), C(/lib) and the like is checked as the path it leads to; each backend checks the real
                path again where it is (the local backend, the C(overlay_agent) role for its data roots).
            type: str
            required: true
          target:
            description:
              - Absolute path in the container, without C(..); each target at most once.
              - Never a path that is, holds or lies inside what the container start provides, which a mount would
                hide - C(/proc), C(/sys), C(/dev), C(/etc/hosts), C(/etc/passwd), C(/etc/group), C(/etc/shadow),
                C(/etc/nsswitch.conf), C(/etc/resolv.conf), C(/etc/hostname), the runtime bundle
                C(/opt/backendai-runtime), C(/run/backendai), C(/run/sshd), Nomad's C(/local), C(/secrets) and
                C(/alloc), and the session user's C(~/.ssh) (so neither C(/), C(/etc), C(/opt), C(/run), C(/home) nor
                the user's home itself; C(/home/work/data) is fine).
            type: str
            required: true
          read_only:
            description: Mount read-only.
            type: bool
            default: false
      ssh:
        description:
          - The session's SSH keypair and the sshd of every container. The keypair is made once per session, kept in
            the secret backend (O(spec.secrets)) and never appears in a job, its Env or Meta, or a result.
        type: dict
        suboptions:
          key_type:
            description: Key type of the session keypair.
            type: str
            choices: [ed25519, rsa]
            default: ed25519
          key_bits:
            description: RSA key size, 2048 to 16384. Only with O(spec.ssh.key_type=rsa).
            type: int
            default: 3072
          port:
            description: Port sshd listens on in every container, 1 to 65535; must differ from O(spec.master_port).
            type: int
            default: 2200
      secrets:
        description: Where the session keypair is kept; the job's tasks read it at runtime.
        type: dict
        suboptions:
          backend:
            description:
              - V(nomad-variables) - the Nomad variable C(nomad/jobs/<name>), read by a C(nomadVar) template.
              - V(vault) - Vault KV v2 at O(spec.secrets.mount)/O(spec.secrets.path), read with the job's workload
                identity (a C(vault) block).
            type: str
            choices: [nomad-variables, vault]
            default: nomad-variables
          mount:
            description: Vault KV v2 mount. Only with O(spec.secrets.backend=vault).
            type: str
            default: secret
          path:
            description:
              - Vault KV path under the mount (the secret is C(<path>/<name>)). Only with
                O(spec.secrets.backend=vault).
            type: str
          role:
            description: Vault role of the job's workload identity (Nomad's default role when omitted). Only with
              O(spec.secrets.backend=vault).
            type: str
      network:
        description: Network of the containers.
        type: dict
        suboptions:
          mode:
            description:
              - V(auto), the only mode - every session gets a private network of its own (Nomad network mode
                C(cni/backendai), with signed C(cni { args })), on one agent or across agents.
              - V(bridge) is refused (Nomad's shared bridge holds every other allocation of the agent), and so is
                V(cni/<name>) (a CNI network of your own is not private to the session).
            type: str
            choices: [auto]
            default: auto
          underlay_encryption:
            description:
              - How a multi-node session's VXLAN crosses the underlay between its agents.
              - V(wireguard) - only inside WireGuard between agents (each agent's one WireGuard interface, keys
                derived from its agent key, the session's peers in its signed C(cni { args })). The underlay
                sees only WireGuard packets, and a host on it cannot inject frames.
              - V(none) - VXLAN over the underlay as it is, for an underlay that is encrypted already. The job's
                C(BAI_ENC) and O(spec.network.underlay_encryption) in the session's view show which.
            type: str
            choices: [wireguard, none]
            default: wireguard
      master_port:
        description: C(MASTER_PORT) of every container (torch's rendezvous port), 1 to 65535.
        type: int
        default: 12345
      env:
        description:
          - Extra environment variables of every container (names C([A-Za-z_][A-Za-z0-9_]*); values strings,
            numbers or booleans).
          - The cluster variables (C(BACKENDAI_CLUSTER_*), C(BACKENDAI_KERNEL_ID), C(BACKENDAI_SESSION_ID),
            C(WORLD_SIZE), C(WORLD_RANK), C(RANK), C(LOCAL_RANK), C(MASTER_ADDR), C(MASTER_PORT), C(TF_CONFIG))
            cannot be overridden.
        type: dict
      roles:
        description:
          - A heterogeneous cluster - roles with their own replicas, image, command, resources and env.
          - Exactly one role is named C(main), with one replica; main1 comes first, then the roles in spec order.
        type: list
        elements: dict
        suboptions:
          name:
            description:
              - Role name, the hostname prefix - a lowercase DNS label of at most 32 characters that does not end in
                a digit.
            type: str
            required: true
          replicas:
            description: Containers of this role (V(1) for C(main)).
            type: int
            default: 1
          image:
            description: Image of this role's containers (default O(spec.image)).
            type: str
          command:
            description: Argv of this role's containers (default O(spec.command)).
            type: list
            elements: str
          resources:
            description: Resources of each of this role's containers.
            type: dict
            suboptions:
              cpu:
                description: CPU in MHz (default O(spec.resources.cpu)).
                type: int
              memory:
                description: Memory in MB (default O(spec.resources.memory)).
                type: int
              gpu:
                description: GPU devices (default O(spec.resources.gpu)).
                type: int
          env:
            description: Variables added to (or replacing those of) O(spec.env) for this role.
            type: dict
      placement:
        description: How containers are spread when they do not all fit on one agent.
        type: dict
        suboptions:
          strategy:
            description:
              - V(concentrated) uses as few agents as possible, V(dispersed) as many. Ties are broken by agent name;
                the same input always gives the same plan.
            type: str
            choices: [concentrated, dispersed]
            default: concentrated
      datacenters:
        description: Only agents in these datacenters (default - any).
        type: list
        elements: str
      ports:
        description:
          - Extra ports main1 publishes on its agent (sshd's port is always published, with label C(ssh)).
        type: list
        elements: dict
        suboptions:
          label:
            description: Port label, C([a-z][a-z0-9_]*), unique, not C(ssh).
            type: str
            required: true
          port:
            description: Container port, 1 to 65535, not the ssh port or O(spec.master_port).
            type: int
            required: true
      mpi:
        description: The session's OpenMPI hostfile.
        type: dict
        suboptions:
          slots:
            description: Slots per container (C(main1 slots=N) lines), 1 to 4096.
            type: int
            default: 1
      user:
        description:
          - Who every login (C(ssh main1), C(ssh sub1)) and the command run as in every container, like Backend.AI's
            C(work) user; its home is C(/home/<name>), where C(~/.ssh) holds the session keys (owned by it).
          - sshd runs privileged, allows only this user and refuses root logins (unless the user is root).
          - Mounts keep their owners - choose O(spec.user.uid)/O(spec.user.gid) to match the owner of the mounted data.
        type: dict
        suboptions:
          name:
            description:
              - User name, C([a-z_][a-z0-9_-]*), at most 32 characters, not C(sshd) or C(nobody).
              - V(root) runs everything as root (home C(/root), ids 0), and only with O(spec.user.allow_root=true).
            type: str
            default: work
          uid:
            description: The user's uid, 1 to 4294967294 but not 65534 (nobody); 0 only for V(root).
            type: int
            default: 1000
          gid:
            description: The user's primary gid, 1 to 4294967294 but not 65534; 0 only for V(root).
            type: int
            default: 1000
          allow_root:
            description: Allow O(spec.user.name=root). Without it a root user is refused.
            type: bool
            default: false
      failure:
        description:
          - What the session does when a container's command fails (exits non-zero, is killed, OOM included), its
            container disappears, or its heartbeat file stops changing; applied inside the session by every
            container's supervisor, on both backends. See the collection's docs/failure-policy.md.
          - Only containers with a command take part; an interactive container (no command) is not watched.
        type: dict
        suboptions:
          policy:
            description:
              - V(none) leaves a failed container failed (the session is C(DEGRADED) until the session module with C(state=present) repairs it).
              - V(fail) stops every container at once; the session ends C(ERROR) naming the first failure.
              - V(restart_all) stops every command and starts them all again together (same names, addresses, keys,
                ranks); the command sees C(BACKENDAI_RESTART_COUNT).
              - V(restart_one) restarts only the failed container's command (for workloads that rejoin, e.g. torchrun's
                elastic agent).
            type: str
            choices: [none, fail, restart_all, restart_one]
            default: none
          max_restarts:
            description: Restarts within O(spec.failure.window) seconds after which the policy becomes V(fail), 0 to 1000.
            type: int
            default: 3
          window:
            description: The window of O(spec.failure.max_restarts), in seconds (1 to 604800).
            type: int
            default: 600
          fail_on_exit_codes:
            description: Exit codes (1 to 255) that mean "do not retry" and make the session fail at once; V([]) retries
              every code.
            type: list
            elements: int
            default: [2, 126, 127]
          hang_timeout:
            description:
              - Seconds (5 to 86400) the command's heartbeat file (C($BACKENDAI_HEARTBEAT_FILE), which the command or
                its launcher touches) may stay unchanged before the command counts as hung and failed; V(0) does not watch it.
            type: int
            default: 0
          rejoin_timeout:
            description: Seconds (5 to 86400) the gang waits for a container that is gone or does not answer to come
              back before the session fails.
            type: int
            default: 360
          port:
            description: The TCP port every container's supervisor listens on, on the session network (not O(spec.ssh.port),
              O(spec.master_port) or a published port).
            type: int
            default: 2201
      max_run_time:
        description:
          - Seconds (1 to 2592000) a session may run; when the first of its containers has run that long, every
            container stops its command and the session ends C(ERROR) with the reason C(max_run_time <N>s exceeded).
            Unset, there is no limit.
          - Interactive containers (no command) are bounded too, and so is a session where no container runs a
            command. Kept by every container's supervisor, on both backends; see the collection's
            docs/session-lifecycle.md.
        type: int
      keep_after:
        description:
          - Seconds (0 to 2592000) a finished session (every command ended, or the session ended C(ERROR), its
            max_run_time included) keeps its containers, logs and network before they are removed. Unset, they stay
            until the session module's C(state=absent).
          - A session where no container runs a command ends only at its O(spec.max_run_time) or by its failure policy,
            so it needs one of them for C(keep_after). Who removes them on each backend is in the collection's
            docs/session-lifecycle.md.
        type: int
"""
