# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad CLI path of ``session_render``: a signed session's network slot claims as Nomad variable
specification files, and the ``nomad`` commands that run the rendered session and remove it again.

A signed job carries the VNI and subnet of one slot (or of an aligned block of slots). The ``session``
module claims that slot itself (``_network_claims``); on the CLI path the user does, with one
``nomad var put`` per slot, of the very variable ``_network_claims`` writes (same path, namespace and
items), so that ``session state=absent`` / destroy_session.yml later finds and releases it as its own.

What the commands rely on, from Nomad's CLI (hashicorp/nomad ``command/var_put.go``,
``command/job_run.go``, ``command/var_purge.go``):

* ``nomad var put @FILE`` reads a whole variable specification from FILE and picks the parser from
  the extension, ``.hcl`` or ``.json`` (``setParserForFileArg``; ``-in`` is only needed for stdin or
  another extension). It writes with ``Variables().CheckedUpdate``: ``PUT /v1/var/<path>?cas=<index>``.
* ``-check-index 0`` sets that index to 0 explicitly (``parseCheckIndex``: any given value enforces
  the check): create only if absent, the ``cas=0`` with which ``_network_claims`` claims a slot. If
  the slot is already claimed the server answers 409 and the command fails (``handleCASError``)
  without writing anything.
* ``-namespace`` replaces the specification's namespace (``makeVariable``: "Step on the namespace in
  the object if one is provided by flag") and is the request's namespace; without it the shell's
  ``NOMAD_NAMESPACE`` would decide. So every command here names its namespace.
* ``nomad job run`` registers the job in the namespace its jobspec names ("Force the namespace to be
  that of the job"): a signed job always names it, because the MAC covers the namespace.

Pure: text in, text out; the module writes the files.
"""

from __future__ import annotations

import shlex
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import var_file as _nomad_var_file
from ansible_collections.backendai.cluster.plugins.module_utils._errors import InputError, Problem
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import preferred_slot
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim, claim_path
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import slot_count

#: ``<job>.slot-<n>.var.hcl`` (job names hold no dot, so the prefix ``<job>.slot-`` is the session's own).
CLAIM_INFIX = ".slot-"


def claim_file_name(job: str, slot: int, fmt: str = "hcl") -> str:
    return "%s%s%d%s" % (job, CLAIM_INFIX, slot, _nomad_var_file.FORMATS[fmt])


def is_claim_file(job: str, name: str) -> bool:
    """Whether ``name`` is a claim file of session ``job`` (any slot, any format)."""
    head = job + CLAIM_INFIX
    if not name.startswith(head):
        return False
    rest = name[len(head):]
    return any(rest.endswith(ext) and rest[:-len(ext)].isdigit() for ext in _nomad_var_file.FORMATS.values())


#: ``<job>.agents-<k>.var.hcl``: chunk ``k`` of the session's agent table (args version 4).
TABLE_INFIX = ".agents-"


def table_file_name(job: str, chunk: int, fmt: str = "hcl") -> str:
    return "%s%s%d%s" % (job, TABLE_INFIX, chunk, _nomad_var_file.FORMATS[fmt])


def is_table_file(job: str, name: str) -> bool:
    """Whether ``name`` is an agent table file of session ``job`` (any chunk, any format)."""
    head = job + TABLE_INFIX
    rest = name[len(head):] if name.startswith(head) else ""
    return any(rest.endswith(ext) and rest[:-len(ext)].isdigit() for ext in _nomad_var_file.FORMATS.values())


def table_files(job: str, table: t.Sequence[t.Tuple[str, t.Mapping[str, str]]], claims_namespace: str,
                fmt: str = "hcl") -> t.List[t.Tuple[str, str, str]]:
    """(file name, variable path, variable specification) of every chunk of the session's agent table
    (``RenderedSession.table``), as ``NetworkClaims.write_table`` writes them, in the claims namespace."""
    return [(table_file_name(job, k, fmt), path, _nomad_var_file.render_items(path, claims_namespace, items, fmt))
            for k, (path, items) in enumerate(table)]


def claim_files(claim: Claim, claims_namespace: str, fmt: str = "hcl") -> t.List[t.Tuple[str, str]]:
    """(file name, variable specification) of every slot of the claim's block, as ``NetworkClaims.claim`` writes
    them: path ``backendai-cluster/network/slots/<n>`` in the claims namespace, items ``Claim.items()``."""
    return [(claim_file_name(claim.job, slot, fmt),
             _nomad_var_file.render_items(claim_path(slot), claims_namespace, claim.items(), fmt))
            for slot in claim.block]


def choose_slot(network_slot: t.Optional[int], namespace: str, job: str, slots: int,
                count: t.Optional[int] = None) -> int:
    """The first slot of the session's block: ``network_slot`` (checked) or the session's preferred one."""
    count = count or slot_count()
    if network_slot is None:
        return preferred_slot(namespace, job, count) // slots * slots
    if not 0 <= network_slot <= count - slots or network_slot % slots:
        if slots == 1:
            allowed = "an integer from 0 to %d (one of the cluster's %d session network slots)" % (count - 1, count)
        else:
            allowed = ("a multiple of %d from 0 to %d: this session needs an aligned block of %d slots of the "
                       "cluster's %d" % (slots, count - slots, slots, count))
        raise InputError("network_slot", [Problem("network_slot", "must be " + allowed, network_slot, True)])
    return network_slot


def _ns(namespace: str) -> str:
    return "-namespace=%s" % shlex.quote(namespace)


def run_commands(claim_paths: t.Sequence[str], claims_namespace: str, secret_file: str, namespace: str,
                 job_file: str, table_paths: t.Sequence[str] = ()) -> t.List[str]:
    """The commands that run the rendered session, in order: claim every slot (create only if absent), write the
    agent table (``table_paths``: its files), store the keypair, register the job. Unsigned (no claims, no table, no
    ``namespace``): the two commands of the keypair and the job."""
    out = ["nomad var put %s -check-index=0 %s" % (_ns(claims_namespace), shlex.quote("@" + path))
           for path in claim_paths]
    out += ["nomad var put %s %s" % (_ns(claims_namespace), shlex.quote("@" + path)) for path in table_paths]
    out.append("nomad var put %s%s" % ("%s " % _ns(namespace) if namespace else "", shlex.quote("@" + secret_file)))
    out.append("nomad job run %s%s" % ("" if job_file.endswith(".hcl") else "-json ", shlex.quote(job_file)))
    return out


def teardown_commands(job: str, namespace: str, secret_path: str, claims_namespace: str,
                      slots: t.Sequence[int], table_vars: t.Sequence[str] = ()) -> t.List[str]:
    """The commands that remove the session again, in the order the ``session`` module does: purge the job (its
    allocations hold the slot's VNI and subnet until then), delete the agent table (``table_vars``: its variable
    paths) while the slots are still claimed, release the slots, delete the keypair."""
    ns = "%s " % _ns(namespace) if namespace else ""
    out = ["nomad job stop %s-purge %s" % (ns, shlex.quote(job))]
    out += ["nomad var purge %s %s" % (_ns(claims_namespace), path) for path in table_vars]
    out += ["nomad var purge %s %s" % (_ns(claims_namespace), claim_path(slot)) for slot in slots]
    out.append("nomad var purge %s%s" % (ns, shlex.quote(secret_path)))
    return out
