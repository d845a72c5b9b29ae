# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a session's SSH keypair lives, and the few operations on it.

The keypair is written once, with check-and-set ``cas=0`` (create only if absent), to a Nomad
Variable ``nomad/jobs/<job>`` or a Vault KV v2 secret, BEFORE the job is registered: a task whose
``nomadVar`` is missing blocks forever (nomad#17220). Afterwards the private key read along with the
public key is handed to ``hide`` (Ansible's ``no_log_values``) and dropped; only ``session_exec``
keeps it (:meth:`SecretStore.read_keypair`), for its ssh to main1. Deleting on rollback only removes a secret that holds this run's public key.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import CASConflict, NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import PRIVATE_KEY_ITEM, PUBLIC_KEY_ITEM, secret_path
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultCASConflict, VaultClient

NOMAD_VARIABLES = "nomad-variables"
VAULT = "vault"
_NOMAD_VAR_TEMPLATE = re.compile(r'nomadVar "([^"]+)"')
_VAULT_TEMPLATE = re.compile(r'secret "([^"]+?)/data/([^"]+)"')


class SecretLocation(t.NamedTuple):
    backend: str  # nomad-variables or vault
    path: str  # variable path, or the KV path under the mount
    mount: str = ""  # vault only

    def describe(self) -> str:
        if self.backend == VAULT:
            return "Vault KV v2 secret %s/data/%s" % (self.mount, self.path)
        return "Nomad variable %s" % self.path

    def public(self) -> t.Dict[str, str]:
        """A secret-free description for results (where the key lives, not the key)."""
        out = {"backend": self.backend, "path": self.path, "private_key_item": PRIVATE_KEY_ITEM,
               "public_key_item": PUBLIC_KEY_ITEM}
        if self.backend == VAULT:
            out["mount"] = self.mount
        return out


class SecretExists(BackendAIClusterError):
    """The check-and-set create found a secret already there (left behind, or another run's)."""


def location_of_spec(spec: SessionSpec) -> SecretLocation:
    """Where the spec says the keypair lives."""
    if spec.secrets.backend == VAULT:
        return SecretLocation(VAULT, secret_path(spec), spec.secrets.mount)
    return SecretLocation(NOMAD_VARIABLES, secret_path(spec))


def location_of_job(job: t.Mapping[str, t.Any]) -> t.Optional[SecretLocation]:
    """Where an existing job's tasks read the keypair (from its templates), or None if it does not say."""
    for group in job.get("TaskGroups") or []:
        for task in group.get("Tasks") or []:
            for tmpl in task.get("Templates") or []:
                text = tmpl.get("EmbeddedTmpl") or ""
                match = _VAULT_TEMPLATE.search(text)
                if match:
                    return SecretLocation(VAULT, match.group(2), match.group(1))
                match = _NOMAD_VAR_TEMPLATE.search(text)
                if match:
                    return SecretLocation(NOMAD_VARIABLES, match.group(1))
    return None


class SecretStore:
    """One session's keypair secret, in Nomad Variables or Vault KV v2."""

    def __init__(self, location: SecretLocation, nomad: NomadClient, vault: t.Callable[[], VaultClient],
                 hide: t.Callable[..., None]) -> None:
        self.location = location
        self._nomad = nomad
        self._vault_factory = vault
        self._hide = hide
        self._modify_index: t.Optional[int] = None

    def _vault(self) -> VaultClient:
        return self._vault_factory()

    def _read_items(self, keep_private: bool = False) -> t.Optional[t.Tuple[t.Dict[str, t.Any], int]]:
        """(items, version) of the secret, or None; the private key is hidden at once (and dropped unless kept)."""
        loc = self.location
        if loc.backend == VAULT:
            secret = self._vault().read_secret(loc.mount, loc.path)
            if secret is None:
                return None
            items = dict(secret.get("data") or {})
            version = int((secret.get("metadata") or {}).get("version") or 0)
        else:
            variable = self._nomad.get_variable(loc.path)
            if variable is None:
                return None
            items = dict(variable.get("Items") or {})
            version = int(variable.get("ModifyIndex") or 0)
        self._hide(items.get(PRIVATE_KEY_ITEM))
        if not keep_private:
            items.pop(PRIVATE_KEY_ITEM, None)
        return items, version

    def read_keypair(self) -> t.Optional[SSHKeypair]:
        """The stored keypair (its private key hidden before it is returned), or None when an item is missing."""
        found = self._read_items(keep_private=True)
        private, public = (found[0].get(PRIVATE_KEY_ITEM), found[0].get(PUBLIC_KEY_ITEM)) if found else (None, None)
        if isinstance(private, str) and "PRIVATE KEY" in private and isinstance(public, str) and public:
            return SSHKeypair(private, public)
        return None

    def read_public_key(self) -> t.Optional[str]:
        """The stored public key (None when the secret or its public key item is missing)."""
        found = self._read_items()
        if found is None:
            return None
        value = found[0].get(PUBLIC_KEY_ITEM)
        return value if isinstance(value, str) and value else None

    def exists(self) -> bool:
        loc = self.location
        if loc.backend == VAULT:
            return self._read_items() is not None
        # metadata only: the listing never carries Items
        return any(v.get("Path") == loc.path for v in self._nomad.list_variables(prefix=loc.path))

    def create(self, keypair: SSHKeypair) -> None:
        """Write the keypair with ``cas=0``; :class:`SecretExists` if something is already there."""
        loc = self.location
        items = {PRIVATE_KEY_ITEM: keypair.private_key, PUBLIC_KEY_ITEM: keypair.public_key}
        try:
            if loc.backend == VAULT:
                self._vault().write_secret(loc.mount, loc.path, items, cas=0)
            else:
                meta = self._nomad.put_variable(loc.path, items, cas=0)
                self._modify_index = int(meta.get("ModifyIndex") or 0) or None
        except (CASConflict, VaultCASConflict):
            raise SecretExists("%s already exists" % loc.describe()) from None

    def delete(self) -> None:
        """Delete the secret (absent is fine)."""
        loc = self.location
        if loc.backend == VAULT:
            self._vault().delete_secret(loc.mount, loc.path)
        else:
            self._nomad.delete_variable(loc.path)

    def delete_if_ours(self, public_key: str) -> bool:
        """Rollback: delete the secret only if it holds ``public_key`` (check-and-set on Nomad). True if deleted."""
        found = self._read_items()
        if found is None:
            return False
        items, version = found
        if " ".join(str(items.get(PUBLIC_KEY_ITEM) or "").split()[:2]) != " ".join(public_key.split()[:2]):
            return False
        loc = self.location
        if loc.backend == VAULT:
            self._vault().delete_secret(loc.mount, loc.path)
        else:
            self._nomad.delete_variable(loc.path, cas=version or self._modify_index)
        return True
