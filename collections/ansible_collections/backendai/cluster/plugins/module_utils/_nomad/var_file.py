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
    """The keypair's variable specification text (HCL laid out as nomad fmt leaves it, or JSON)."""
    return render_items(path, namespace, {PRIVATE_KEY_ITEM: private_key, PUBLIC_KEY_ITEM: public_key}, fmt)


def render_items(path: str, namespace: str, items: t.Mapping[str, str], fmt: str = "hcl") -> str:
    """A variable specification of any items, in their order: a multi-line value (a PEM key) becomes a heredoc."""
    if fmt == "json":
        body: t.Dict[str, t.Any] = {"Path": path}
        if namespace:
            body["Namespace"] = namespace
        body["Items"] = dict(items)
        return json.dumps(body, indent=2) + "\n"
    head = [("path", quote(path))] + ([("namespace", quote(namespace))] if namespace else [])
    width = max(len(item[0]) for item in head)
    lines = ["%s = %s" % (k.ljust(width), v) for k, v in head]
    width = max(len(k) for k in items)
    lines += ["", "items {"]
    for key, value in items.items():
        if "\n" in value:
            if not value.endswith("\n"):
                value += "\n"
            delimiter = heredoc_delimiter(value)
            lines.append("  %s = <<%s\n%s%s" % (key.ljust(width), delimiter, value, delimiter))
        else:
            lines.append("  %s = %s" % (key.ljust(width), quote(value)))
    lines.append("}")
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
