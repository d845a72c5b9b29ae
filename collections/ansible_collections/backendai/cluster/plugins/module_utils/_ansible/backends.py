# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place the ``session`` and ``session_info`` modules choose their backend.

``backend`` if given, else ``nomad`` when ``nomad_addr`` (or NOMAD_ADDR) is set, else ``local``.
Each backend is imported only when chosen, so a local run loads neither python-nomad, requests
nor hvac, and a Nomad run not the local runtime (Ansible still ships both in the module's payload).
"""

from __future__ import annotations

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import LOCAL, NOMAD, ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._session.protocol import SessionBackend


def backend_name(module: ClusterModule) -> str:
    return str(module.params.get("backend") or (NOMAD if module.nomad_address_given() else LOCAL))


def session_backend(module: ClusterModule, changes: bool = False) -> SessionBackend:
    """The backend the module's options choose; ``changes``: it will create or remove sessions
    (checks the Nomad namespace, the libraries and options a change needs before anything is written)."""
    p = module.params
    if backend_name(module) == LOCAL:
        from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
        from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
        from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

        # sessions of container images run as the tasks of their Nomad job (the backends never import each other)
        task = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                         (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
        return LocalBackend(p["state_dir"], p.get("mount_roots"), task)

    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nomad_backend import NomadBackend
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import refuse_all_namespaces
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl

    network = None
    if changes:
        refuse_all_namespaces(p["namespace"], "backendai.cluster.session")
        if p["state"] == "present" and not module.check_mode:
            module.require("cryptography")
        secrets = (p["spec"] or {}).get("secrets") if isinstance(p["spec"], dict) else None
        if isinstance(secrets, dict) and secrets.get("backend") == "vault":
            module.vault()  # library and options checked before anything is written
        network = NetworkControl(p["network_key_file"], p["network_claims_namespace"], module.hide)
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import catalogue_from_env

    return NomadBackend(module.nomad(), module.vault, module.hide, module.warn, network=network,
                        node_catalogue=catalogue_from_env() if changes else None)
