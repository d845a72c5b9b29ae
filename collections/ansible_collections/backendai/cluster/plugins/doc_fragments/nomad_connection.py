# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Nomad connection options; paired one-to-one with ``_ansible.args.nomad_connection_argument_spec``.

    ``DOCUMENTATION`` is for modules (which read the environment through the argument spec's
    fallbacks), ``PLUGINS`` for the inventory plugin (the same options, with ``env:`` entries).
    """

    DOCUMENTATION = r"""
options:
  nomad_addr:
    description:
      - Address of the Nomad HTTP API, C(http://host:port) or C(https://host:port).
      - If not set, the value of the E(NOMAD_ADDR) environment variable is used.
      - When neither is set, C(http://127.0.0.1:4646) is used by the nomad backend.
      - The C(session) and C(session_info) modules use the nomad backend by default only when an address is given this way.
    type: str
  token:
    description:
      - Nomad ACL token (its secret ID), sent as the C(X-Nomad-Token) header. It is never logged.
      - If not set, the value of the E(NOMAD_TOKEN) environment variable is used.
    type: str
  namespace:
    description:
      - Nomad namespace of the session's job and variable.
      - If not set, the value of the E(NOMAD_NAMESPACE) environment variable is used, else C(default).
      - V(*) (every namespace) is only for reading - M(backendai.cluster.session_info); the other modules refuse it.
    type: str
  region:
    description:
      - Nomad region to send requests to.
      - If not set, the value of the E(NOMAD_REGION) environment variable is used, else the agent's region.
    type: str
  ca_cert:
    description:
      - Path to a PEM CA certificate to verify the Nomad server's TLS certificate with.
      - If not set, the value of the E(NOMAD_CACERT) environment variable is used, else the system CA bundle.
    type: path
  client_cert:
    description:
      - Path to a PEM client certificate for mutual TLS. Requires O(client_key).
      - If not set, the value of the E(NOMAD_CLIENT_CERT) environment variable is used.
    type: path
  client_key:
    description:
      - Path to the PEM private key of O(client_cert).
      - If not set, the value of the E(NOMAD_CLIENT_KEY) environment variable is used.
    type: path
  validate_certs:
    description:
      - Verify the TLS certificates of Nomad (and of Vault). Verification is on by default.
      - If not set, the inverse of the E(NOMAD_SKIP_VERIFY) environment variable is used
        (E(NOMAD_SKIP_VERIFY=1) turns verification off).
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for each HTTP request to Nomad (and to Vault).
    type: float
    default: 10.0
"""

    PLUGINS = r"""
options:
  nomad_addr:
    description:
      - Address of the Nomad HTTP API, C(http://host:port) or C(https://host:port).
      - If not set, the value of the E(NOMAD_ADDR) environment variable is used.
      - When neither is set, C(http://127.0.0.1:4646) is used.
    type: str
    env:
      - name: NOMAD_ADDR
  token:
    description:
      - Nomad ACL token (its secret ID), sent as the C(X-Nomad-Token) header. It is never logged.
      - If not set, the value of the E(NOMAD_TOKEN) environment variable is used.
    type: str
    env:
      - name: NOMAD_TOKEN
  namespace:
    description:
      - Nomad namespace.
      - If not set, the value of the E(NOMAD_NAMESPACE) environment variable is used, else C(default).
    type: str
    env:
      - name: NOMAD_NAMESPACE
  region:
    description:
      - Nomad region to send requests to.
      - If not set, the value of the E(NOMAD_REGION) environment variable is used, else the agent's region.
    type: str
    env:
      - name: NOMAD_REGION
  ca_cert:
    description:
      - Path to a PEM CA certificate to verify the Nomad server's TLS certificate with.
      - If not set, the value of the E(NOMAD_CACERT) environment variable is used, else the system CA bundle.
    type: path
    env:
      - name: NOMAD_CACERT
  client_cert:
    description:
      - Path to a PEM client certificate for mutual TLS. Requires O(client_key).
      - If not set, the value of the E(NOMAD_CLIENT_CERT) environment variable is used.
    type: path
    env:
      - name: NOMAD_CLIENT_CERT
  client_key:
    description:
      - Path to the PEM private key of O(client_cert).
      - If not set, the value of the E(NOMAD_CLIENT_KEY) environment variable is used.
    type: path
    env:
      - name: NOMAD_CLIENT_KEY
  validate_certs:
    description:
      - Verify the TLS certificate of Nomad. Verification is on by default.
      - If not set in the configuration, the inverse of the E(NOMAD_SKIP_VERIFY) environment variable is used
        (E(NOMAD_SKIP_VERIFY=1) turns verification off).
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for each HTTP request to Nomad.
    type: float
    default: 10.0
"""
