# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``session_render`` module does: a session rendered into Nomad job files, for the ``nomad`` CLI.

:func:`render_files` reads the agents (from the module's ``agents`` or from Nomad), the keypair (an existing
variable file's, else a new one) and, to sign, the cluster network key and the agents' underlay addresses; places
the session and renders it once (signed), and writes the job (JSON, HCL), the MPI hostfile, the keypair's and the slot claims'
variable specification files and the ``nomad`` commands that run and remove it (``_nomad.cli``). Everything is
read and checked before anything is written; the module itself only declares its options and calls this.
"""

from __future__ import annotations

import dataclasses
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, InputError, ModuleFailure, Problem
from ansible_collections.backendai.cluster.plugins.module_utils._files import ensure_file
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import cli as _nomad_cli
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import var_file as _nomad_var_file
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import plan_slots, secret_path
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import DEFAULT_NAMESPACE, JobNetwork, underlay_network
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import live_agents, underlay_addresses
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session, render_session
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import refuse_all_namespaces
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair, generate_keypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import plan_summary

MODULE = "backendai.cluster.session_render"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _secret_keypair(base: ClusterModule, p: t.Dict[str, t.Any], spec: SessionSpec) -> t.Tuple[SSHKeypair, str]:
    """The keypair of O(write_secret): the one in an existing variable file, else a new one."""
    if spec.secrets.backend != "nomad-variables":
        raise InputError("write_secret", [Problem(
            "session.secrets.backend", "write_secret writes a Nomad variable file, so it needs nomad-variables (the "
            "session module stores Vault keypairs)", spec.secrets.backend, True)])
    path = os.path.join(p["output_dir"], _nomad_var_file.file_name(spec.name, p["secret_format"]))
    found = _nomad_var_file.read_keypair(_read(path), p["secret_format"])
    if found is not None and found[0] == "nomad/jobs/%s" % spec.name:
        base.hide(found[1])
        return SSHKeypair(found[1], found[2]), path
    base.require("cryptography")
    return generate_keypair(spec.ssh.key_type, spec.ssh.key_bits or 3072), path


def _unsigned_reason(p: t.Dict[str, t.Any]) -> str:
    """Why the render is unsigned ("" when it is to be signed)."""
    if p["sign"] is False:
        return "sign=false was given"
    if not p["write_secret"]:
        return ("write_secret is off: a signed job comes with its keypair and its network slot claim, as variable "
                "specification files (write_secret=true, with the cluster network key at %s)" % p["network_key_file"])
    if p["sign"] is None and not os.path.exists(p["network_key_file"]):
        return ("there is no cluster network key at %s (network_key_file, or BACKENDAI_NETWORK_KEY_FILE): copy the "
                "key the overlay_agent role made on the control node there, or set network_key_file, and render again"
                % p["network_key_file"])
    return ""


def _underlay(base: ClusterModule, live: bool, agents: t.List[t.Any], plan: SessionPlan,
              signing: bool) -> JobNetwork:
    """The plan's agents' underlay addresses and MTU: read from Nomad for live agents, else the agents' own
    C(underlay_ip)/C(underlay_mtu). Signing needs every address; unsigned, missing ones become placeholders."""
    names = list(plan.agents_used)
    if live:
        try:
            found = underlay_addresses(base.nomad(), names, agents)
        except (NomadError, ValueError) as exc:
            if signing:
                raise BackendAIClusterError("sign: the agents' underlay addresses could not be read from Nomad (%s); "
                                            "a signed job needs every agent's real address" % exc) from None
            base.warn("the agents' underlay addresses could not be read (%s); the job shows placeholders" % exc)
            found = {}
    else:
        index = {str(a.get("name")): i for i, a in enumerate(agents) if isinstance(a, dict)}
        missing = sorted((n for n in names if not agents[index[n]].get("underlay_ip")), key=index.__getitem__)
        if signing and missing:
            raise InputError("agents", [Problem(
                "agents[%d].underlay_ip" % index[n],
                "is required to sign: the signed job lists every agent's real underlay address (the one the "
                "overlay_agent role wrote into agent %s's backendai.conflist); give it, or render against the cluster "
                "(nomad_addr, without agents), or set sign=false for an unsigned job" % n) for n in missing])
        try:
            found = underlay_addresses(None, [n for n in names if n not in missing], agents)
        except ValueError as exc:
            raise InputError("agents", [Problem("agents", str(exc))]) from None
    return underlay_network(found)


def _write_files(base: ClusterModule, out: str, files: t.List[t.Tuple[str, str, int]], stale: t.List[str],
                 result: t.Dict[str, t.Any]) -> t.List[str]:
    """Write (path, content, mode) where the content changed; remove ``stale`` files. Returns the paths."""
    if not base.check_mode:
        os.makedirs(out, exist_ok=True)
    for path in stale:
        result["changed"] = True
        if not base.check_mode:
            os.unlink(path)
    paths = []
    for path, content, mode in files:
        before = _read(path) if path.endswith(".json") and not path.endswith(".var.json") and base.diff_mode else None
        if ensure_file(path, content, check_mode=base.check_mode, mode=mode):
            result["changed"] = True
            if before is not None:
                result["diff"] = dict(before=before, after=content, before_header=path, after_header=path)
        paths.append(path)
    return paths


def render_files(base: ClusterModule) -> t.Dict[str, t.Any]:
    """The module's result: the plan, the job and, with O(output_dir), the files written (ModuleFailure if not)."""
    p = base.params
    if p["sign"] and not p["write_secret"]:
        raise ModuleFailure("sign=true needs write_secret=true: a signed job is run with its keypair and its network "
                            "slot claim, which write_secret writes as variable specification files")
    refuse_all_namespaces(p["namespace"], MODULE)
    agents = p["agents"]
    live = agents is None
    if live:
        if not base.nomad_address_given():
            raise ModuleFailure("agents is required unless a Nomad address is given (nomad_addr or NOMAD_ADDR)")
        try:
            agents = live_agents(base.nomad(), namespace=p["namespace"] or "default")
        except NomadError as exc:
            raise ModuleFailure("reading the agents from Nomad: %s" % exc) from None
    unsigned_reason = _unsigned_reason(p)
    # a signed job names its namespace (the MAC covers it, and `nomad job run` then registers it there)
    namespace = (p["namespace"] or DEFAULT_NAMESPACE) if not unsigned_reason else (p["namespace"] or "")
    control = NetworkControl(p["network_key_file"], p["network_claims_namespace"], base.hide)
    claims_namespace = control.claims_namespace
    claim: t.Optional[Claim] = None
    spec = parse_spec(p["spec"])  # once: the typed spec flows down
    keypair, secret_file = _secret_keypair(base, p, spec) if p["write_secret"] else (None, "")
    placed = plan_session(spec, agents, public_key=keypair.public_key if keypair else "", session_id=p["session_id"] or "")
    network: t.Optional[JobNetwork] = None
    if placed.placed:  # everything is checked and read before anything is written
        slots = plan_slots(placed)
        slot = _nomad_cli.choose_slot(p["network_slot"], namespace, spec.name, slots)
        network = dataclasses.replace(_underlay(base, live, agents, placed, signing=not unsigned_reason), slot=slot,
                                      table_namespace=claims_namespace)
        if not unsigned_reason:
            network = dataclasses.replace(network, key=control.key())
            claim = Claim(slot, namespace, spec.name, placed.session_id, slots)
    rendered = render_session(placed, namespace, p["region"] or "", network, with_hcl=True)  # once
    plan = plan_summary(placed)
    result: t.Dict[str, t.Any] = dict(changed=False, plan=plan, job=None, hcl=rendered.hcl, hostfile=rendered.hostfile)
    if not rendered.plan.placed:
        if p["fail_on_pending"]:
            raise ModuleFailure("session %s is PENDING: %s" % (plan["name"], plan["reason"]), result)
        return result
    result["job"] = {"Job": rendered.job}
    if rendered.plan.spec.secrets.backend == "nomad-variables":
        result["secret_path"] = secret_path(spec)
    result["network"] = rendered.network
    if unsigned_reason:
        result["unsigned_reason"] = unsigned_reason
    if p["output_dir"]:
        out, name = p["output_dir"], plan["name"]
        contents = {"json": (".json", rendered.job_json), "hcl": (".nomad.hcl", rendered.hcl),
                    "hostfile": (".hostfile", rendered.hostfile)}
        files = [(os.path.join(out, name + contents[fmt][0]), contents[fmt][1], 0o644) for fmt in p["formats"]]
        if keypair is not None:
            text = _nomad_var_file.render(result["secret_path"], namespace, keypair.private_key, keypair.public_key,
                                          p["secret_format"])
            base.hide(keypair.private_key)
            files.append((secret_file, text, 0o600))
        # the claims are not secret; 0600 like the keypair's file beside them, so that the CLI flow's files are alike
        claims = [(os.path.join(out, n), text, 0o600)
                  for n, text in (_nomad_cli.claim_files(claim, claims_namespace, p["secret_format"]) if claim else [])]
        tables = _nomad_cli.table_files(name, rendered.table, claims_namespace, p["secret_format"]) if claim else []
        claims += [(os.path.join(out, n), text, 0o600) for n, _path, text in tables]
        keep = {os.path.basename(path) for path, _text, _mode in claims}
        stale = [os.path.join(out, n) for n in (sorted(os.listdir(out)) if os.path.isdir(out) else [])
                 if (_nomad_cli.is_claim_file(name, n) or _nomad_cli.is_table_file(name, n)) and n not in keep]
        paths = _write_files(base, out, files + claims, stale, result)
        result["files"] = paths[:len(p["formats"])]
        if keypair is not None:
            result["secret_file"] = secret_file
            job_file = os.path.join(out, name + (".nomad.hcl" if "hcl" in p["formats"] else ".json"))
            claim_paths = [path for path, _text, _mode in claims[:len(claims) - len(tables)]]
            table_paths = [path for path, _text, _mode in claims[len(claims) - len(tables):]]
            result["commands"] = _nomad_cli.run_commands(claim_paths, claims_namespace, secret_file,
                                                         "" if unsigned_reason else namespace, job_file, table_paths)
            slots = list(claim.block) if claim else []
            result["teardown"] = _nomad_cli.teardown_commands(name, "" if unsigned_reason else namespace,
                                                              result["secret_path"], claims_namespace, slots,
                                                              [path for _n, path, _text in tables])
            if claim is not None:
                result["claim_files"] = claim_paths
                result["table_files"] = table_paths
    return result
