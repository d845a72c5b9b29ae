# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""In-test API doubles of Nomad's and Vault's HTTP APIs (not Nomad, not Vault).

``http_shell.py`` (server, TLS, faults, recordings) and ``pki.py`` are shared; ``server.py`` is the Nomad HTTP
API (routes, query parameters, status codes) over ``model/`` (Nomad's behaviour, no HTTP); ``vault.py`` is
Vault's KV v2; ``fixtures.py`` has the pytest fixtures, ``watch.py`` a sampler of the Nomad model's state.
"""

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
