# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session keypair as a Nomad variable specification file, for the Nomad CLI path.

``nomad var put @FILE`` reads a variable specification in HCL (``FILE.hcl``, what ``-in hcl`` reads:
``path``, ``namespace`` and an ``items`` block, parsed by Nomad's command/var_put.go
parseVariableSpec) or JSON (``FILE.json``, the ``api.Variable`` object: ``Path``, ``Namespace``,
``Items``); it picks the format from the extension. The job's ``nomadVar`` template reads the items
``ssh_private_key`` and ``ssh_public_key`` at ``nomad/jobs/<job>``, so after ``nomad var put`` the
job's tasks find their keys and ``nomad job run`` does not wait forever.

The file holds the private key: it is written with mode 0600 and its content never goes into a
result. Reading it back (``read_keypair``) lets a second render keep the same keys and session ID.
Pure text functions; no I/O.
"""

from __future__ import annotations

import json
import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.hcl import heredoc_delimiter, quote
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import PRIVATE_KEY_ITEM, PUBLIC_KEY_ITEM

FORMATS = {"hcl": ".var.hcl", "json": ".var.json"}


def file_name(job_name: str, fmt: str) -> str:
    return job_name + FORMATS[fmt]


def render(path: str, namespace: str, private_key: str, public_key: str, fmt: str = "hcl") -> str:
    """The variable specification text (HCL laid out as nomad fmt leaves it, or JSON)."""
    if fmt == "json":
        body: t.Dict[str, t.Any] = {"Path": path}
        if namespace:
            body["Namespace"] = namespace
        body["Items"] = {PRIVATE_KEY_ITEM: private_key, PUBLIC_KEY_ITEM: public_key}
        return json.dumps(body, indent=2) + "\n"
    if not private_key.endswith("\n"):
        private_key += "\n"
    head = [("path", quote(path))] + ([("namespace", quote(namespace))] if namespace else [])
    width = max(len(item[0]) for item in head)
    lines = ["%s = %s" % (k.ljust(width), v) for k, v in head]
    delimiter = heredoc_delimiter(private_key)
    width = max(len(PRIVATE_KEY_ITEM), len(PUBLIC_KEY_ITEM))
    lines += ["", "items {",
              "  %s = <<%s\n%s%s" % (PRIVATE_KEY_ITEM.ljust(width), delimiter, private_key, delimiter),
              "  %s = %s" % (PUBLIC_KEY_ITEM.ljust(width), quote(public_key)),
              "}"]
    return "\n".join(lines) + "\n"


def read_keypair(text: str, fmt: str = "hcl") -> t.Optional[t.Tuple[str, str, str]]:
    """(path, private key, public key) from a file ``render`` wrote; None if it is not one."""
    if fmt == "json":
        try:
            body = json.loads(text)
            items = body["Items"]
            return body["Path"], items[PRIVATE_KEY_ITEM], items[PUBLIC_KEY_ITEM]
        except (ValueError, KeyError, TypeError):
            return None
    path = re.search(r'^path *= "([^"\\]*)"$', text, re.M)
    private = re.search(r"^  %s *= <<([A-Za-z0-9_]+)\n(.*?\n)\1$" % PRIVATE_KEY_ITEM, text, re.M | re.S)
    public = re.search(r'^  %s *= "([^"\\]*)"$' % PUBLIC_KEY_ITEM, text, re.M)
    if not (path and private and public):
        return None
    return path.group(1), private.group(2), public.group(1)
