# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Default values and environment variable names of the collection's options. A leaf: imports nothing.

The argument specs (``_ansible.args``), the clients (``_nomad.api``, ``_vault.client``) and the
backends read their defaults here, so that none of them imports another layer for a constant.
"""

from __future__ import annotations

#: Where the local backend keeps its sessions (option ``state_dir``).
DEFAULT_STATE_ROOT = "~/.local/state/backendai-cluster/sessions"
#: Where the control node keeps the cluster network key (the overlay_agent role makes it there once).
#: Written with ``~`` as the docs show it: ``_network._session_network.read_key`` (every reader) expands it.
DEFAULT_NETWORK_KEY_FILE = "~/.config/backendai-cluster/network.key"
#: Where local agents keep their state (``local_agents`` option ``state_dir``).
DEFAULT_AGENTS_ROOT = "~/.local/state/backendai-cluster/agents"
#: The only directories the local backend mounts from (option ``mount_roots``): the usual homes of
#: shared data, none of which holds the network key or a session's state.
DEFAULT_MOUNT_ROOTS = ("/srv", "/data", "/mnt")

DEFAULT_NOMAD_ADDR = "http://127.0.0.1:4646"
DEFAULT_VAULT_ADDR = "http://127.0.0.1:8200"
#: Seconds per HTTP request, for Nomad and Vault alike (option ``timeout``).
DEFAULT_TIMEOUT = 10.0

#: Option name -> environment variable, applied by the Ansible argument spec (and by the clients'
#: ``*_from_env`` for non-Ansible callers). They follow the ``nomad`` and ``vault`` CLIs.
NOMAD_ENV = {
    "nomad_addr": "NOMAD_ADDR",
    "token": "NOMAD_TOKEN",
    "namespace": "NOMAD_NAMESPACE",
    "region": "NOMAD_REGION",
    "ca_cert": "NOMAD_CACERT",
    "client_cert": "NOMAD_CLIENT_CERT",
    "client_key": "NOMAD_CLIENT_KEY",
}
#: Options whose environment variable is the inverse (``NOMAD_SKIP_VERIFY=1`` -> ``validate_certs=false``).
NOMAD_INVERTED_ENV = {"validate_certs": "NOMAD_SKIP_VERIFY"}
VAULT_ENV = {
    "vault_addr": "VAULT_ADDR",
    "vault_token": "VAULT_TOKEN",
    "vault_namespace": "VAULT_NAMESPACE",
    "vault_ca_cert": "VAULT_CACERT",
}
NETWORK_ENV = {
    "network_key_file": "BACKENDAI_NETWORK_KEY_FILE",
    "network_claims_namespace": "BACKENDAI_NETWORK_CLAIMS_NAMESPACE",
}
