# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared base of this collection's modules (like community.docker's ``AnsibleDockerClient``).

:class:`ClusterModule` merges the common connection options (``_ansible.args``) into a module's
own argument spec, builds the Nomad and Vault clients from them, reports a missing python-nomad,
hvac or cryptography with ``missing_required_lib``, and turns the collection's expected errors
(every :class:`BackendAIClusterError`, the clients' errors included) into ``fail_json``
without a traceback. Secrets met at runtime are registered with :meth:`ClusterModule.hide`, so
Ansible masks them in every result and log line.
"""

from __future__ import annotations

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.args import (
    local_runtime_argument_spec,
    nomad_connection_argument_spec,
    session_network_argument_spec,
    vault_connection_argument_spec,
)
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, ModuleFailure

NOMAD = "nomad"
VAULT = "vault"
LOCAL = "local"
NETWORK = "network"

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
    from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultClient


def _library(name: str) -> t.Tuple[bool, t.Optional[BaseException]]:
    """(available?, import error) of a Python library as pip names it. The clients are imported only
    when asked for, so that a module run that needs neither Nomad nor Vault does not load them."""
    if name == "python-nomad":
        from ansible_collections.backendai.cluster.plugins.module_utils._nomad import api

        return api.HAS_PYTHON_NOMAD and api.HAS_REQUESTS, api.PYTHON_NOMAD_IMPORT_ERROR
    if name == "hvac":
        from ansible_collections.backendai.cluster.plugins.module_utils._vault import client

        return client.HAS_HVAC, client.HVAC_IMPORT_ERROR
    if name == "cryptography":
        from ansible_collections.backendai.cluster.plugins.module_utils._session import keys

        return keys.HAS_CRYPTOGRAPHY, keys.CRYPTOGRAPHY_IMPORT_ERROR
    raise ValueError("unknown library %r" % name)


def merged_argument_spec(argument_spec: t.Mapping[str, t.Any], options: t.Iterable[str]) -> t.Dict[str, t.Any]:
    """The module's own options plus the shared option groups named in ``options`` (nomad, vault, local, network)."""
    spec: t.Dict[str, t.Any] = {}
    groups = set(options)
    if NOMAD in groups:
        spec.update(nomad_connection_argument_spec())
    if VAULT in groups:
        spec.update(vault_connection_argument_spec())
    if LOCAL in groups:
        spec.update(local_runtime_argument_spec())
    if NETWORK in groups:
        spec.update(session_network_argument_spec())
    clash = set(spec) & set(argument_spec)
    if clash:
        raise ValueError("module options %s clash with the shared connection options" % ", ".join(sorted(clash)))
    spec.update(argument_spec)
    return spec


#: Options naming a directory this collection keeps state in (created when missing), and the
#: playbook variables that set them.
DIRECTORY_OPTIONS = {"state_dir": "-e session_state_dir / -e local_agents_state_dir in the playbooks"}


def check_directory_option(option: str, value: str) -> None:
    """A state directory option must be a directory, or a path whose first existing part is one."""
    path = os.path.abspath(os.path.expanduser(str(value)))
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return
        probe = parent
    if not os.path.isdir(probe):
        kind = "a regular file" if os.path.isfile(probe) else "not a directory"
        what = probe if probe == path else "%s lies below %s, which" % (path, probe)
        raise ModuleFailure("%s: must be a directory (it is created if missing), but %s is %s (%s)"
                            % (option, what, kind, DIRECTORY_OPTIONS.get(option, "the module option")))


class ClusterModule:
    """An ``AnsibleModule`` with the shared options, clients and error handling of this collection."""

    def __init__(self, argument_spec: t.Mapping[str, t.Any], shared: t.Iterable[str] = (NOMAD, VAULT),
                 supports_check_mode: bool = True, **kwargs: t.Any) -> None:
        self.module = AnsibleModule(argument_spec=merged_argument_spec(argument_spec, shared),
                                    supports_check_mode=supports_check_mode, **kwargs)
        self._nomad: t.Optional[NomadClient] = None
        self._vault: t.Optional[VaultClient] = None

    # Plain accessors ---------------------------------------------------------------------------
    @property
    def params(self) -> t.Dict[str, t.Any]:
        return self.module.params

    @property
    def check_mode(self) -> bool:
        return bool(self.module.check_mode)

    @property
    def diff_mode(self) -> bool:
        return bool(self.module._diff)

    def hide(self, *secrets: t.Optional[str]) -> None:
        """Mask these values wherever they might appear in results, warnings or logs."""
        for secret in secrets:
            if secret:
                self.module.no_log_values.add(secret)
                # a PEM key is masked line by line too (it may be shown split)
                for line in secret.splitlines():
                    if len(line) >= 16 and not line.startswith("-----"):
                        self.module.no_log_values.add(line)

    def warn(self, message: str) -> None:
        self.module.warn(message)

    def fail(self, msg: str, exception: str = "", **result: t.Any) -> t.NoReturn:
        """Fail the task; an expected error gets no traceback (``exception=""``), even with tracebacks on."""
        result.pop("msg", None)
        result.pop("failed", None)
        self.module.fail_json(msg=msg, exception=exception, **result)

    def exit(self, **result: t.Any) -> t.NoReturn:
        self.module.exit_json(**result)

    # Libraries ---------------------------------------------------------------------------------
    def require(self, *libraries: str) -> None:
        """Fail with ``missing_required_lib`` for the first library in ``libraries`` that is missing."""
        for name in libraries:
            available, error = _library(name)
            if not available:
                self.fail(missing_required_lib(name), exception=str(error) if error else "")

    # Clients -----------------------------------------------------------------------------------
    def nomad_address_given(self) -> bool:
        """Whether ``nomad_addr`` was set (as an option or through NOMAD_ADDR)."""
        return bool(self.params.get("nomad_addr"))

    def nomad(self) -> NomadClient:
        if self._nomad is None:
            self.require("python-nomad")
            from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
            from ansible_collections.backendai.cluster.plugins.module_utils._nomad.connection import NomadConnection

            try:
                connection = NomadConnection.from_params(self.params)
            except ValueError as exc:
                self.fail("invalid Nomad connection options: %s" % exc)
            self._nomad = NomadClient(connection)
        return self._nomad

    def vault(self) -> VaultClient:
        if self._vault is None:
            self.require("hvac")
            from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultClient, VaultConnection

            try:
                connection = VaultConnection.from_params(self.params)
            except ValueError as exc:
                self.fail("invalid Vault connection options: %s" % exc)
            self._vault = VaultClient(connection)
        return self._vault

    def close(self) -> None:
        for client in (self._nomad, self._vault):
            if client is not None:
                client.close()

    # Running -----------------------------------------------------------------------------------
    def run(self, body: t.Callable[["ClusterModule"], t.Dict[str, t.Any]]) -> t.NoReturn:
        """Call ``body(self)``; exit with its result, or fail with the message of an expected error."""
        failure: t.Optional[t.Tuple[str, t.Dict[str, t.Any]]] = None
        try:
            for option in DIRECTORY_OPTIONS:
                if self.params.get(option):
                    check_directory_option(option, self.params[option])
            result = body(self)
        except BackendAIClusterError as exc:
            failure = (str(exc), exc.details())
        finally:
            self.close()
        if failure is not None:
            self.fail(failure[0], **failure[1])
        self.exit(**result)
