# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection options every module of this collection shares: the single source of truth.

Each group of options is paired one-to-one with a doc fragment (``plugins/doc_fragments``):

=================================  ==========================================
argument spec                      doc fragment
=================================  ==========================================
:func:`nomad_connection_argument_spec`  ``backendai.cluster.nomad_connection``
:func:`vault_connection_argument_spec`  ``backendai.cluster.vault_connection``
:func:`local_runtime_argument_spec`     ``backendai.cluster.local_runtime``
:func:`session_network_argument_spec`   ``backendai.cluster.session_network``
=================================  ==========================================

A unit test asserts that names, types, defaults, aliases, ``no_log`` and the environment variables
of each pair match exactly. Environment fallbacks follow the ``nomad`` and ``vault`` CLIs.
``nomad_addr`` deliberately has no default: whether it (or ``NOMAD_ADDR``) is set decides the
default backend of the ``session`` modules; :class:`NomadConnection` falls back to
``http://127.0.0.1:4646``.
"""

from __future__ import annotations

import copy
import os
import typing as t

from ansible.module_utils.basic import env_fallback
from ansible.module_utils.errors import AnsibleFallbackNotFound
from ansible.module_utils.parsing.convert_bool import BOOLEANS_TRUE

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import (
    DEFAULT_MOUNT_ROOTS,
    DEFAULT_NETWORK_KEY_FILE,
    DEFAULT_STATE_ROOT,
    DEFAULT_TIMEOUT,
    DEFAULT_VAULT_ADDR,
    NETWORK_ENV,
    NOMAD_ENV,
    NOMAD_INVERTED_ENV,
    VAULT_ENV,
)


def skip_verify_fallback(*names: str) -> bool:
    """Ansible ``fallback`` for ``validate_certs``: the inverse of NOMAD_SKIP_VERIFY (or of ``names``)."""
    for name in names or ("NOMAD_SKIP_VERIFY",):
        value = os.environ.get(name)
        if value:
            return value.strip().lower() not in BOOLEANS_TRUE
    raise AnsibleFallbackNotFound


_NOMAD_CONNECTION: t.Dict[str, t.Dict[str, t.Any]] = {
    "nomad_addr": {"type": "str", "fallback": (env_fallback, [NOMAD_ENV["nomad_addr"]])},
    "token": {"type": "str", "no_log": True, "fallback": (env_fallback, [NOMAD_ENV["token"]])},
    "namespace": {"type": "str", "fallback": (env_fallback, [NOMAD_ENV["namespace"]])},
    "region": {"type": "str", "fallback": (env_fallback, [NOMAD_ENV["region"]])},
    "ca_cert": {"type": "path", "fallback": (env_fallback, [NOMAD_ENV["ca_cert"]])},
    "client_cert": {"type": "path", "fallback": (env_fallback, [NOMAD_ENV["client_cert"]])},
    # a path, not the key itself: keep it visible
    "client_key": {"type": "path", "no_log": False, "fallback": (env_fallback, [NOMAD_ENV["client_key"]])},
    "validate_certs": {"type": "bool", "default": True, "fallback": (skip_verify_fallback, [NOMAD_INVERTED_ENV["validate_certs"]])},
    "timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
}

_VAULT_CONNECTION: t.Dict[str, t.Dict[str, t.Any]] = {
    "vault_addr": {"type": "str", "default": DEFAULT_VAULT_ADDR, "fallback": (env_fallback, [VAULT_ENV["vault_addr"]])},
    "vault_token": {"type": "str", "no_log": True, "fallback": (env_fallback, [VAULT_ENV["vault_token"]])},
    "vault_namespace": {"type": "str", "fallback": (env_fallback, [VAULT_ENV["vault_namespace"]])},
    "vault_ca_cert": {"type": "path", "fallback": (env_fallback, [VAULT_ENV["vault_ca_cert"]])},
}

_LOCAL_RUNTIME: t.Dict[str, t.Dict[str, t.Any]] = {
    "state_dir": {"type": "path", "default": DEFAULT_STATE_ROOT},
    "mount_roots": {"type": "list", "elements": "path", "default": list(DEFAULT_MOUNT_ROOTS)},
}

_SESSION_NETWORK: t.Dict[str, t.Dict[str, t.Any]] = {
    # a path, not the key itself: keep it visible (the key's text is never read into a result)
    "network_key_file": {"type": "path", "no_log": False, "default": DEFAULT_NETWORK_KEY_FILE,
                         "fallback": (env_fallback, [NETWORK_ENV["network_key_file"]])},
    "network_claims_namespace": {"type": "str", "default": "default",
                                 "fallback": (env_fallback, [NETWORK_ENV["network_claims_namespace"]])},
}


def nomad_connection_argument_spec() -> t.Dict[str, t.Dict[str, t.Any]]:
    """Nomad connection options (doc fragment ``backendai.cluster.nomad_connection``)."""
    return copy.deepcopy(_NOMAD_CONNECTION)


def vault_connection_argument_spec() -> t.Dict[str, t.Dict[str, t.Any]]:
    """Vault options (doc fragment ``backendai.cluster.vault_connection``).

    ``validate_certs`` and ``timeout`` are the Nomad options of the same name.
    """
    return copy.deepcopy(_VAULT_CONNECTION)


def local_runtime_argument_spec() -> t.Dict[str, t.Dict[str, t.Any]]:
    """The local backend's state directory and mount roots (doc fragment ``backendai.cluster.local_runtime``)."""
    return copy.deepcopy(_LOCAL_RUNTIME)


def session_network_argument_spec() -> t.Dict[str, t.Dict[str, t.Any]]:
    """The cluster network key file and the claims namespace (doc fragment ``backendai.cluster.session_network``)."""
    return copy.deepcopy(_SESSION_NETWORK)
