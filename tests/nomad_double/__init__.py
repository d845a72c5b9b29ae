# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""In-test API doubles of Nomad's and Vault's HTTP APIs (not Nomad, not Vault): see server.py, vault.py."""

from .server import (  # noqa: F401
    SCHEMA_PATH,
    Fault,
    HTTPDouble,
    NomadAPIDouble,
    RecordedRequest,
    SchemaChecker,
    TestPKI,
    make_test_pki,
)
from .vault import VaultKVDouble  # noqa: F401
