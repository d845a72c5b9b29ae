# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""render_hcl: the HCL jobspec, parsed back with python-hcl2, must be the job render_job built.

The inverse (HCL -> Nomad API JSON) is written here from its own small table, independent of the
renderer's tables, so a wrong HCL name on either side shows up as a difference.
"""

from __future__ import annotations

import copy
import re
import typing as t

import pytest

hcl2 = pytest.importorskip("hcl2")
from hcl2.utils import SerializationOptions  # noqa: E402  (after importorskip)

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as _nomad_job  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session import placement as _placement  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session import plan as _session_plan  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session import spec as _spec  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.hcl import render_hcl  # noqa: E402

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVzZXItdGVzdC1rZXktbm90LXJlYWxseS1hLWtleQ test"


# --- python-hcl2 -> Nomad API JSON ------------------------------------------------------------------
#
# python-hcl2 8.x quirks this inverse deals with:
# * strings keep their quotes and their escapes verbatim ('"a\\"b"'), and ``$${`` / ``%%{`` are NOT
#   unescaped (hcl2's own strip_string_quotes option resolves backslash escapes but still leaves
#   ``$${``): so we parse with the default options and unescape ourselves, in one left-to-right pass
#   (backslash escapes, then the two template escapes), exactly as HCL's scanner reads them;
# * heredocs come back as '"<<EOT\n...\nEOT"' (raw body, real newlines); its preserve_heredocs=False
#   mode drops the body's final newline, which is part of an HCL heredoc's value, so we keep the raw
#   form and cut the markers off ourselves. Backslashes are literal in heredocs, template escapes
#   are not;
# * block labels are kept quoted ('"train-42"'); every block is a list of bodies marked
#   ``__is_block__``, while ``name = { ... }`` map assignment is a plain dict with quoted keys;
# * its lexer only accepts ``$${`` when a ``}`` follows somewhere (``"$${"`` alone is valid HCL but
#   a python-hcl2 syntax error), so that case is checked on the text instead.

HCL_OPTIONS = SerializationOptions(with_comments=False)
HEREDOC_RE = re.compile(r'^"<<(-?)([A-Za-z][A-Za-z0-9._-]*)\n(.*)\2"$', re.S)
SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def unescape_template(raw: str, backslashes: bool) -> str:
    out, i = [], 0
    while i < len(raw):
        if backslashes and raw[i] == "\\":
            c = raw[i + 1]
            if c in SIMPLE_ESCAPES:
                out.append(SIMPLE_ESCAPES[c])
                i += 2
            elif c in "uU":
                width = 4 if c == "u" else 8
                out.append(chr(int(raw[i + 2:i + 2 + width], 16)))
                i += 2 + width
            else:
                raise AssertionError("invalid HCL escape %r in %r" % (raw[i:i + 2], raw))
        elif raw.startswith("$${", i) or raw.startswith("%%{", i):
            out.append(raw[i + 1:i + 3])
            i += 3
        elif raw.startswith("${", i) or raw.startswith("%{", i):
            raise AssertionError("unescaped template sequence in %r" % raw)
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def hcl_string(value: t.Any) -> t.Any:
    """The value HCL gives a python-hcl2 string (quoted or heredoc); other types as they are."""
    if not isinstance(value, str):
        return value
    heredoc = HEREDOC_RE.match(value)
    if heredoc:
        assert heredoc.group(1) == "", "indented heredocs are not expected"
        return unescape_template(heredoc.group(3), backslashes=False)
    assert value.startswith('"') and value.endswith('"'), "not a string literal: %r" % value
    return unescape_template(value[1:-1], backslashes=True)


GO_UNITS = {"h": 3600 * 10 ** 9, "m": 60 * 10 ** 9, "s": 10 ** 9, "ms": 10 ** 6, "us": 10 ** 3, "ns": 1}


def go_duration_ns(text: str) -> int:
    parts = re.findall(r"(\d+)(h|ms|us|ns|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, "not a Go duration: %r" % text
    return sum(int(n) * GO_UNITS[u] for n, u in parts)


# HCL block type -> {HCL name: (API key, kind, nested block type)}.
# kinds: value (string/number/bool), list, duration, map (meta/env), block (one), blocks (repeated),
# labelled (repeated "name" "label" {}; the label goes to LABEL_KEY), config (free-form).
INVERSE: t.Dict[str, t.Dict[str, t.Tuple[str, str, str]]] = {
    "job": {"name": ("Name", "value", ""), "type": ("Type", "value", ""),
            "namespace": ("Namespace", "value", ""), "region": ("Region", "value", ""),
            "datacenters": ("Datacenters", "list", ""), "meta": ("Meta", "map", ""),
            "ui": ("UI", "block", "ui"), "constraint": ("Constraints", "blocks", "constraint"),
            "reschedule": ("Reschedule", "block", "reschedule"), "group": ("TaskGroups", "labelled", "group")},
    "ui": {"description": ("Description", "value", ""), "link": ("Links", "blocks", "link")},
    "link": {"label": ("Label", "value", ""), "url": ("URL", "value", "")},
    "group": {"count": ("Count", "value", ""), "meta": ("Meta", "map", ""),
              "constraint": ("Constraints", "blocks", "constraint"),
              "network": ("Networks", "blocks", "network"), "service": ("Services", "blocks", "service"),
              "restart": ("RestartPolicy", "block", "restart"),
              "reschedule": ("ReschedulePolicy", "block", "reschedule"),
              "disconnect": ("Disconnect", "block", "disconnect"),
              "volume": ("Volumes", "labelled_map", "volume"),
              "task": ("Tasks", "labelled", "task")},
    "disconnect": {"lost_after": ("LostAfter", "duration", ""), "replace": ("Replace", "value", ""),
                   "reconcile": ("Reconcile", "value", "")},
    "volume": {"type": ("Type", "value", ""), "source": ("Source", "value", ""), "read_only": ("ReadOnly", "value", "")},
    "volume_mount": {"volume": ("Volume", "value", ""), "destination": ("Destination", "value", ""),
                     "read_only": ("ReadOnly", "value", "")},
    "constraint": {"attribute": ("LTarget", "value", ""), "value": ("RTarget", "value", ""),
                   "operator": ("Operand", "value", "")},
    "network": {"mode": ("Mode", "value", ""), "hostname": ("Hostname", "value", ""),
                "port": ("DynamicPorts", "labelled", "port"), "cni": ("CNI", "block", "cni")},
    "cni": {"args": ("Args", "attrmap", "")},
    "port": {"to": ("To", "value", ""), "static": ("Value", "value", "")},
    "service": {"name": ("Name", "value", ""), "provider": ("Provider", "value", ""),
                "address_mode": ("AddressMode", "value", ""), "port": ("PortLabel", "value", ""),
                "tags": ("Tags", "list", "")},
    "restart": {"attempts": ("Attempts", "value", ""), "interval": ("Interval", "duration", ""),
                "delay": ("Delay", "duration", ""), "mode": ("Mode", "value", "")},
    "reschedule": {"attempts": ("Attempts", "value", ""), "unlimited": ("Unlimited", "value", ""),
                   "interval": ("Interval", "duration", ""), "delay": ("Delay", "duration", "")},
    "task": {"driver": ("Driver", "value", ""), "user": ("User", "value", ""), "config": ("Config", "config", ""),
             "env": ("Env", "map", ""), "meta": ("Meta", "map", ""),
             "resources": ("Resources", "block", "resources"),
             "volume_mount": ("VolumeMounts", "blocks", "volume_mount"),
             "template": ("Templates", "blocks", "template"), "kill_timeout": ("KillTimeout", "duration", ""),
             "vault": ("Vault", "block", "vault")},
    "resources": {"cpu": ("CPU", "value", ""), "memory": ("MemoryMB", "value", ""),
                  "device": ("Devices", "labelled", "device")},
    "device": {"count": ("Count", "value", "")},
    "template": {"data": ("EmbeddedTmpl", "value", ""), "destination": ("DestPath", "value", ""),
                 "perms": ("Perms", "value", ""), "change_mode": ("ChangeMode", "value", ""),
                 "change_script": ("ChangeScript", "block", "change_script")},
    "change_script": {"command": ("Command", "value", ""), "args": ("Args", "list", ""),
                      "timeout": ("Timeout", "duration", ""), "fail_on_error": ("FailOnError", "value", "")},
    "vault": {"role": ("Role", "value", ""), "change_mode": ("ChangeMode", "value", ""),
              "policies": ("Policies", "list", "")},
}
LABEL_KEY = {"job": "ID", "group": "Name", "task": "Name", "port": "Label", "device": "Name", "volume": "Name"}
# Driver config: repeated blocks are the block form of a list of the same name in the JSON (no renaming).
CONFIG_BLOCK_ALIASES: t.Dict[str, str] = {}


def body_only(body: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    return {k: v for k, v in body.items() if k != "__is_block__"}


def single_block(value: t.Any, where: str) -> t.Dict[str, t.Any]:
    assert isinstance(value, list) and len(value) == 1 and value[0].get("__is_block__"), \
        "%s: expected exactly one block, got %r" % (where, value)
    return body_only(value[0])


def hcl_map(value: t.Any, where: str) -> t.Dict[str, str]:
    if isinstance(value, list):  # meta { KEY = "v" }
        return {k: hcl_string(v) for k, v in single_block(value, where).items()}
    assert isinstance(value, dict) and "__is_block__" not in value, where  # meta = { "a.b" = "v" }
    return {hcl_string(k): hcl_string(v) for k, v in value.items()}


def hcl_config(body: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {}
    for key, value in body_only(body).items():
        if isinstance(value, list) and value and all(isinstance(v, dict) and v.get("__is_block__") for v in value):
            # Nomad (jobspec2 BlocksAsAttrs) turns repeated blocks into a list of objects.
            out[CONFIG_BLOCK_ALIASES.get(key, key)] = [hcl_config(v) for v in value]
        elif isinstance(value, list):
            out[key] = [hcl_string(v) for v in value]
        else:
            out[key] = hcl_string(value)
    return out


def to_api(block_type: str, body: t.Dict[str, t.Any], label: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    table = INVERSE[block_type]
    out: t.Dict[str, t.Any] = {}
    if label is not None:
        out[LABEL_KEY[block_type]] = hcl_string(label)
    for name, value in body_only(body).items():
        assert name in table, "%s: unexpected HCL name %r" % (block_type, name)
        key, kind, nested = table[name]
        where = "%s.%s" % (block_type, name)
        if kind == "value":
            out[key] = hcl_string(value)
        elif kind == "list":
            out[key] = [hcl_string(v) for v in value]
        elif kind == "duration":
            out[key] = go_duration_ns(hcl_string(value))
        elif kind == "map":
            out[key] = hcl_map(value, where)
        elif kind == "attrmap":  # api.CNIConfig.Args is `hcl:"args,optional"`: an attribute, never a block
            assert isinstance(value, dict), "%s: must be an attribute (args = {...}), got %r" % (where, value)
            out[key] = hcl_map(value, where)
        elif kind == "block":
            out[key] = to_api(nested, single_block(value, where))
        elif kind == "blocks":
            out[key] = [to_api(nested, body_only(b)) for b in value]
        elif kind == "labelled":
            items = []
            for labelled in value:
                ((lab, inner),) = labelled.items()
                items.append(to_api(nested, inner, lab))
            out[key] = items
        elif kind == "labelled_map":  # the group's volume "<label>" {}: a map keyed by the label in the JSON
            out[key] = {}
            for labelled in value:
                ((lab, inner),) = labelled.items()
                item = to_api(nested, inner, lab)
                out[key][item["Name"]] = item
        elif kind == "config":
            out[key] = hcl_config(single_block(value, where))
        else:  # pragma: no cover
            raise AssertionError(kind)
    return out


def flat(text: str) -> str:
    """``text`` with the alignment padding before ``=`` taken out (nomad fmt style aligns it)."""
    return re.sub(r"(?m)^( *\S+?) +=", r"\1 =", text)


def parse_job(text: str) -> t.Dict[str, t.Any]:
    parsed = hcl2.loads(text, serialization_options=HCL_OPTIONS)
    assert list(parsed) == ["job"] and len(parsed["job"]) == 1
    ((lab, body),) = parsed["job"][0].items()
    job = to_api("job", body, lab)
    job.setdefault("Name", job["ID"])  # jobspec2 normalizeJob: Name defaults to the job label
    return job


def assert_same_job(rendered: t.Dict[str, t.Any], text: str) -> None:
    """The HCL, parsed and mapped back to API names, equals the job (plain ==, key order ignored)."""
    back = parse_job(text)
    assert back == rendered


# --- plans ---------------------------------------------------------------------------------------

def build_job(spec: t.Dict[str, t.Any], agents: t.List[t.Dict[str, t.Any]], **kwargs: str) -> t.Dict[str, t.Any]:
    parsed = _spec.parse_spec(spec)
    plan = _session_plan.build_plan(parsed, _placement.parse_agents(agents), "3f7c2a94-3c1e-5b1a-9a53-1f1d3a1f0c11")
    assert plan.placed, plan.reason
    return _nomad_job.render_job(plan, **kwargs)


@pytest.fixture(name="single_node_job")
def fixture_single_node_job() -> t.Dict[str, t.Any]:
    return build_job(
        {"name": "sn-3", "image": "python:3.11-slim", "cluster_size": 3, "resources": {"cpu": 500, "memory": 512},
         "env": {"FOO": "bar", "QUOTED": 'say "hi" \\ ${HOME} %{x}'}},
        [{"name": "a1", "cpu": 4000, "memory": 8192}])


def test_single_node_three_containers(single_node_job: t.Dict[str, t.Any]) -> None:
    job = single_node_job
    assert [g["Name"] for g in job["TaskGroups"]] == ["main1", "sub1", "sub2"]
    assert job["TaskGroups"][0]["Networks"][0]["Mode"] == "cni/backendai"
    text = render_hcl(job)
    assert text.startswith('job "sn-3" {\n')
    assert 'attribute = "$${node.unique.name}"' in flat(text)
    assert 'interval = "5m"' in flat(text) and 'delay = "5s"' in flat(text) and 'kill_timeout = "10s"' in flat(text)
    assert "BACKENDAI_ENTRYPOINT = <<EOT\n#!/bin/sh\n" in flat(text)
    assert_same_job(job, text)


def test_multi_node_gpu_mounts_ports() -> None:
    job = build_job(
        {"name": "train-42", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["torchrun", "train.py"],
         "cluster_size": 4, "cluster_mode": "multi-node", "resources": {"cpu": 1000, "memory": 2048, "gpu": 2},
         "mounts": [{"source": "/data", "target": "/home/work/data", "read_only": True},
                    {"source": "/scratch", "target": "/home/work/scratch"}],
         "ports": [{"label": "jupyter", "port": 8888}, {"label": "tensorboard", "port": 6006}],
         "datacenters": ["dc1", "dc2"]},
        [{"name": "a1", "cpu": 2000, "memory": 4096, "gpu": 4},
         {"name": "a2", "cpu": 2500, "memory": 8192, "gpu": 4, "datacenter": "dc2"}],
        namespace="research", region="eu")
    main = job["TaskGroups"][0]
    assert main["Tasks"][0]["Resources"]["Devices"] == [{"Name": "nvidia/gpu", "Count": 2}]
    assert [p["Label"] for p in main["Networks"][0]["DynamicPorts"]] == ["ssh", "jupyter", "tensorboard"]
    text = render_hcl(job)
    assert 'namespace = "research"' in flat(text) and 'region = "eu"' in flat(text)
    assert 'device "nvidia/gpu" {\n          count = 2\n        }' in flat(text)
    assert 'port "tensorboard" {\n        to = 6006\n      }' in flat(text)
    # mounts are host volumes: a volume "mountN" block per group and a volume_mount per task (after the runtime
    # bundle's), no docker mount
    assert flat(text).count('volume "mount0" {\n      type = "host"') == 4 and text.count("volume_mount {") == 3 * 4
    assert "mount {" not in text.replace("volume_mount {", "") and 'type = "bind"' not in flat(text)
    assert_same_job(job, text)


def test_vault_backed_spec() -> None:
    job = build_job(
        {"name": "vault-job", "image": "ubuntu:22.04", "cluster_size": 2, "cluster_mode": "multi-node",
         "secrets": {"backend": "vault", "mount": "kv", "path": "backendai/sessions", "role": "bai-sessions"}},
        [{"name": "n1", "cpu": 1000, "memory": 1024}, {"name": "n2", "cpu": 1000, "memory": 1024}])
    task = job["TaskGroups"][0]["Tasks"][0]
    assert task["Vault"] == {"ChangeMode": "noop", "Role": "bai-sessions"}
    text = render_hcl(job)
    assert 'vault {\n        role = "bai-sessions"\n        change_mode = "noop"\n      }' in flat(text)
    assert "{{ .Data.data.ssh_private_key }}" in flat(text)
    assert_same_job(job, text)


def test_heterogeneous_roles_spec() -> None:
    job = build_job(
        {"name": "hetero", "image": "python:3.11-slim", "cluster_mode": "multi-node",
         "env": {"SHARED": "1"},
         "roles": [{"name": "main", "replicas": 1, "command": ["python", "server.py"]},
                   {"name": "worker", "replicas": 2, "image": "python:3.12-slim", "command": ["python", "work.py"],
                    "resources": {"cpu": 2000, "memory": 4096}, "env": {"ROLE_ONLY": "yes"}}]},
        [{"name": "h1", "cpu": 8000, "memory": 16384}, {"name": "h2", "cpu": 8000, "memory": 16384}])
    assert [g["Name"] for g in job["TaskGroups"]] == ["main1", "worker1", "worker2"]
    worker = job["TaskGroups"][1]["Tasks"][0]
    assert worker["Config"]["image"] == "python:3.12-slim" and worker["Env"]["ROLE_ONLY"] == "yes"
    text = render_hcl(job)
    assert 'group "worker2" {' in flat(text)
    assert_same_job(job, text)


def test_deterministic(single_node_job: t.Dict[str, t.Any]) -> None:
    assert render_hcl(single_node_job) == render_hcl(copy.deepcopy(single_node_job))


# --- escaping ------------------------------------------------------------------------------------

TRICKY = {
    "interp": "${NOMAD_META_X} and ${node.unique.name}",
    "directive": "%{ if true }yes%{ endif }",
    "already_escaped": "$${literal} %%{literal}",
    "dollar_run": "$$${x} $ at end $",
    "percent": "100% {not a directive} %",
    "quotes_backslashes": 'a "quoted" C:\\path\\ and \\n literally',
    "newline_no_trailing": "line1\nline2",
    "heredoc": "line1 ${x} %{y}\n  \"q\" \\n \\\\ \nEOT is not alone\n",
    "heredoc_delims": "EOT\nEOT1\n  EOT2\nend\n",
    "blank_lines": "a\n\n\n",
    "tabs_controls": "tab\there\rcr\x01ctl\x7f",
    "unicode": "héllo ✓ 日本",
    "template_like": '{{ with nomadVar "nomad/jobs/x" }}{{ .k }}{{ end }}',
    "empty": "",
    "only_newline": "\n",
}


def tricky_job() -> t.Dict[str, t.Any]:
    return {
        "ID": "esc", "Name": "esc", "Type": "service", "Datacenters": ["dc1"],
        "Meta": dict(TRICKY),
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Meta": {"dotted.key": "v", "dash-key": "${x}", "plain": "multi\nline\n"},
            "Tasks": [{
                "Name": "t", "Driver": "docker",
                "Config": {"image": "alpine", "args": list(TRICKY.values()),
                           "mount": [{"type": "bind", "source": "/a", "target": "/b", "readonly": True}]},
                "Env": {"E": TRICKY["quotes_backslashes"], "F": TRICKY["interp"]},
                "Templates": [{"EmbeddedTmpl": TRICKY["heredoc_delims"], "DestPath": "local/x"},
                              {"EmbeddedTmpl": TRICKY["heredoc"], "DestPath": "local/y"}],
            }],
        }],
    }


def test_escaping_round_trips() -> None:
    job = tricky_job()
    text = render_hcl(job)
    assert_same_job(job, text)


def test_escaping_text_forms() -> None:
    text = render_hcl(tricky_job())
    assert 'interp = "$${NOMAD_META_X} and $${node.unique.name}"' in flat(text)
    assert 'directive = "%%{ if true }yes%%{ endif }"' in flat(text)
    assert 'already_escaped = "$$${literal} %%%{literal}"' in flat(text)
    assert 'quotes_backslashes = "a \\"quoted\\" C:\\\\path\\\\ and \\\\n literally"' in flat(text)
    assert 'newline_no_trailing = "line1\\nline2"' in flat(text)
    assert 'tabs_controls = "tab\\there\\rcr\\u0001ctl\\u007f"' in flat(text)
    # heredoc body: template escapes only, backslashes and quotes literal
    assert 'heredoc = <<EOT1\nline1 $${x} %%{y}\n  "q" \\n \\\\ \nEOT is not alone\nEOT1\n' in flat(text)
    # every candidate delimiter occurs in the text: the first free one is used
    assert "heredoc_delims = <<EOT3\nEOT\nEOT1\n  EOT2\nend\nEOT3\n" in flat(text)
    # keys that are not identifiers use map assignment
    assert 'meta = {\n      "dotted.key" = "v"\n      "dash-key" = "$${x}"\n' in flat(text)
    # no unescaped template sequence anywhere
    assert not re.search(r"(?<![$])\$\{", text.replace("$${", ""))


def test_unclosed_interpolation_is_escaped() -> None:
    # "$${" with no closing brace is valid HCL but python-hcl2 cannot lex it: check the text.
    job = {"ID": "x", "Type": "batch", "Meta": {"K": "a ${ b", "L": "c %{ d"}, "TaskGroups": []}
    text = render_hcl(job)
    assert 'K = "a $${ b"' in flat(text) and 'L = "c %%{ d"' in flat(text)


@pytest.mark.parametrize("ns, text", [
    (0, "0s"), (5 * 10 ** 9, "5s"), (10 * 10 ** 9, "10s"), (300 * 10 ** 9, "5m"), (90 * 10 ** 9, "1m30s"),
    (3600 * 10 ** 9, "1h"), (1500 * 10 ** 6, "1s500ms"), (1500, "1500ns"), (2 * 10 ** 9 + 3000, "2s3us"), (7 * 86400 * 10 ** 9, "168h"),
])
def test_durations(ns: int, text: str) -> None:
    job = {"ID": "d", "TaskGroups": [{"Name": "g", "RestartPolicy": {"Interval": ns}}]}
    rendered = render_hcl(job)
    assert 'interval = "%s"' % text in rendered
    assert go_duration_ns(text) == ns
    assert parse_job(rendered)["TaskGroups"][0]["RestartPolicy"]["Interval"] == ns


# --- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mutate, where", [
    (lambda j: j.update(Unknown=1), "job: unknown Job key(s) 'Unknown'"),
    (lambda j: j["TaskGroups"][0].update(Scaling={}), "job.TaskGroups[0]: unknown TaskGroup key(s) 'Scaling'"),
    (lambda j: j["TaskGroups"][0].update(Volumes={"data": {"Name": "other", "Type": "host"}}),
     "whose Name is its key 'data'"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0].update(Lifecycle={}), "unknown Task key(s) 'Lifecycle'"),
    (lambda j: j["TaskGroups"][0]["Networks"][0].update(ReservedPorts=[]),
     "job.TaskGroups[0].Networks[0]: unknown NetworkResource key(s) 'ReservedPorts'"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0]["Templates"][0].update(Wait={}),
     "job.TaskGroups[0].Tasks[0].Templates[0]: unknown Template key(s) 'Wait'"),
    (lambda j: j["TaskGroups"][0]["RestartPolicy"].update(Interval="5m"), "a duration must be integer nanoseconds"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0]["Env"].update(N=1), "expected a map of strings"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0]["Config"].update({"bad.key": 1}), "not a valid HCL attribute name"),
    (lambda j: j["TaskGroups"][0].update(Name="a${b}"), "cannot be an HCL block label"),
])
def test_invalid_input_raises(single_node_job: t.Dict[str, t.Any], mutate: t.Callable[[t.Dict[str, t.Any]], None],
                              where: str) -> None:
    job = copy.deepcopy(single_node_job)
    mutate(job)
    with pytest.raises(ValueError) as err:
        render_hcl(job)
    assert where in str(err.value)


def test_register_request_is_rejected(single_node_job: t.Dict[str, t.Any]) -> None:
    with pytest.raises(ValueError, match="register request"):
        render_hcl(_nomad_job.register_request(single_node_job))


def _rendered_whole(job: t.Dict[str, t.Any]) -> str:
    """The jobspec rendered as one block, every group on its own (what render_hcl gives, the slow way)."""
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad import hcl

    lines: t.List[str] = []
    hcl._struct(lines, 0, "Job", job, "job")
    return "\n".join(hcl.nomad_fmt(lines)) + "\n"


def test_groups_of_one_shape_render_as_each_alone() -> None:
    """Groups that differ from an earlier one in a few strings are made from its text (_GroupTexts): the same text,
    to the byte, as rendering each, for strings of every kind: quoted and escaped, template sequences, a newline
    (a heredoc), the mark characters the shapes use, and a label that cannot be one still refused."""
    job = build_job({"name": "sh", "image": "python:3.11-slim", "cluster_size": 6, "cluster_mode": "multi-node",
                     "resources": {"cpu": 500, "memory": 512}, "env": {"FOO": "bar"}},
                    [{"name": "a%d" % i, "cpu": 500, "memory": 512} for i in range(6)])
    groups = job["TaskGroups"]
    groups[2]["Tasks"][0]["Env"]["FOO"] = 'say "hi" \\ ${HOME} %{x}\t'
    groups[3]["Tasks"][0]["Env"]["FOO"] = "two\nlines\n"
    groups[4]["Tasks"][0]["Env"]["FOO"] = "\ue0000\ue001"
    groups[5]["Tasks"][0]["Resources"]["CPU"] = 501
    assert render_hcl(job) == _rendered_whole(job)
    assert_same_job(job, render_hcl(job))
    groups[5]["Name"] = "bad${label}"
    with pytest.raises(ValueError, match="cannot be an HCL block label"):
        render_hcl(job)


def test_a_large_sessions_jobspec_is_the_one_rendered_whole() -> None:
    job = build_job({"name": "big", "image": "python:3.11-slim", "cluster_size": 200, "cluster_mode": "multi-node",
                     "resources": {"cpu": 500, "memory": 512}},
                    [{"name": "a%d" % i, "cpu": 1000 + 500 * (i % 3), "memory": 4096} for i in range(80)])
    assert render_hcl(job) == _rendered_whole(job)
