# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rendered HCL is in ``nomad fmt`` style: every example's jobspec passes the hclwrite-rule
check of hclfmt_check.py, and the check itself catches each kind of deviation."""

from __future__ import annotations

import copy
import glob
import os
import typing as t

import pytest
import yaml

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.hcl import render_hcl
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import render_raw
from hclfmt_check import problems
from repo_helpers import EXAMPLES

hcl2 = pytest.importorskip("hcl2")


def agents() -> t.List[t.Dict[str, t.Any]]:
    with open(os.path.join(EXAMPLES, "agents.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["agents"]


def example_specs() -> t.List[t.Tuple[str, t.Dict[str, t.Any]]]:
    out = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.yml"))):
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        if isinstance(data, dict) and "session" in data:
            out.append((os.path.basename(path), data["session"]))
    return out


def variants() -> t.List[t.Tuple[str, t.Dict[str, t.Any]]]:
    out = example_specs()
    assert len(out) >= 4, out
    base = dict(out[0][1])
    out.append(("vault", dict(base, name="fmt-vault", secrets={"backend": "vault", "path": "bai", "role": "r"})))
    out.append(("env+mounts", dict(base, name="fmt-env", env={"A": "1", "LONGER_NAME": "x"},
                                   mounts=[{"source": "/data", "target": "/data", "read_only": True}],
                                   ports=[{"label": "jupyter", "port": 8888}])))
    return out


@pytest.mark.parametrize("name, spec", variants(), ids=[n for n, _ in variants()])
def test_every_rendered_example_is_nomad_fmt_clean(name: str, spec: t.Dict[str, t.Any]) -> None:
    rendered = render_raw(spec, agents())
    assert rendered.hcl, rendered.plan.reason
    assert problems(rendered.hcl) == []
    hcl2.loads(rendered.hcl)  # still HCL
    assert 'ui {\n    description = "Backend.AI cluster session: ' in rendered.hcl


def test_cni_args_are_a_map_assignment_in_fmt_style() -> None:
    (_, spec), = [s for s in example_specs() if s[0] == "single-node.yml"]
    job = copy.deepcopy(render_raw(spec, agents()).job)
    for group in job["TaskGroups"]:
        group["Networks"][0].update(Mode="cni/backendai", CNI={"Args": {"BACKENDAI_SESSION": "s1",
                                                                          "BACKENDAI_HOST": group["Name"]}})
    text = render_hcl(job)
    assert problems(text) == []
    block = ('      cni {\n        args = {\n          "BACKENDAI_SESSION" = "s1"\n'
             '          "BACKENDAI_HOST"    = "main1"\n        }\n      }\n')
    assert block in text, text[:4000]
    parsed = hcl2.loads(text)
    assert parsed["job"]


GOOD = '''job "x" {
  type        = "batch"
  datacenters = ["dc1", "dc2"]

  meta {
    a    = "1"
    long = <<EOT
line
EOT
    b    = "2"
  }

  group "main1" {
    count = 1

    network {
      mode = "bridge"
    }
  }
}
'''


@pytest.mark.parametrize("bad, expected", [
    (GOOD.replace('  type        = "batch"', '  type = "batch"'), "line 2: '=' at column"),
    (GOOD.replace('    b    = "2"', '    b = "2"'), "line 10: '=' at column"),
    (GOOD.replace("\n\n  group", "\n  group"), "a block needs a blank line before it"),
    (GOOD.replace('    count = 1\n\n', '    count = 1\n'), "a block needs a blank line before it"),
    (GOOD.replace("    count = 1", "   count = 1"), "line 14: indented 3 spaces, 4 expected"),
    (GOOD.replace("<<EOT", "<<-EOT"), "indented heredoc"),
    (GOOD.replace("\nEOT\n", "\n  EOT\n"), "closing delimiter"),
    (GOOD.replace('["dc1", "dc2"]', '[ "dc1","dc2" ]'), "spacing around brackets"),
    (GOOD.replace('  group "main1" {\n', '  group  "main1" {\n'), "two spaces between tokens"),
    (GOOD.replace('  group "main1" {\n', '  group "main1" {\n\n'), "blank line right after '{'"),
    (GOOD.replace("\n\n  meta", "\n\n\n  meta"), "second blank line"),
    (GOOD + "\n", "exactly one newline"),
    (GOOD.replace('      mode = "bridge"', '      mode = "bridge" '), "trailing whitespace"),
])
def test_the_check_catches_each_deviation(bad: str, expected: str) -> None:
    assert problems(GOOD) == []
    found = problems(bad)
    assert any(expected in p for p in found), found
