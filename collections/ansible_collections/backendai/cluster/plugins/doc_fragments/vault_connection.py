# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Vault options; paired one-to-one with ``_ansible.args.vault_connection_argument_spec``."""

    DOCUMENTATION = r"""
options:
  vault_addr:
    description:
      - Address of the Vault HTTP API, used when the session spec has C(secrets.backend=vault).
      - If not set, the value of the E(VAULT_ADDR) environment variable is used.
    type: str
    default: http://127.0.0.1:8200
  vault_token:
    description:
      - Vault token with create, read and delete rights on the session's KV v2 path. It is never logged.
      - If not set, the value of the E(VAULT_TOKEN) environment variable is used.
    type: str
  vault_namespace:
    description:
      - Vault Enterprise namespace (the C(X-Vault-Namespace) header).
      - If not set, the value of the E(VAULT_NAMESPACE) environment variable is used.
    type: str
  vault_ca_cert:
    description:
      - Path to a PEM CA certificate to verify Vault's TLS certificate with (O(validate_certs) applies to Vault too).
      - If not set, the value of the E(VAULT_CACERT) environment variable is used, else the system CA bundle.
    type: path
"""
