# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role backendai.cluster.overlay_agent, entry point main (agent preparation), on this machine with its files
redirected to a temporary directory and the sysctls set to the values they already have (so nothing of the host
changes): check mode changes nothing, the first run writes, the second run changes nothing."""

from __future__ import annotations

import json
import os
import sys
import typing as t

import pytest

from repo_helpers import run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"),
                                reason="needs root and the CNI plugins (scripts/setup)")

PLAYBOOK = """
- name: Prepare this machine as an agent
  hosts: localhost
  gather_facts: false
  roles:
    - backendai.cluster.overlay_agent
"""


def stats(proc: t.Any) -> t.Dict[str, t.Any]:
    return json.loads(proc.stdout)["stats"]["localhost"]


def test_prepare_is_check_mode_safe_and_idempotent(tmp_path: t.Any) -> None:
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    with open("/proc/sys/net/ipv4/ip_forward", encoding="ascii") as f:
        forward = f.read().strip()
    params = {
        "ansible_python_interpreter": sys.executable,
        "overlay_agent_cni_install": False,  # (no apt here; the plugins are checked)
        "overlay_agent_cni_config_dir": str(tmp_path / "cni" / "config"),
        "overlay_agent_modules_file": str(tmp_path / "modules-load.d" / "backendai-cluster.conf"),
        "overlay_agent_sysctl_file": str(tmp_path / "sysctl.d" / "90-backendai-cluster.conf"),
        "overlay_agent_kernel_modules": ["vxlan", "bridge"],
        "overlay_agent_sysctls": {"net.ipv4.ip_forward": forward},
    }
    (tmp_path / "modules-load.d").mkdir()
    (tmp_path / "sysctl.d").mkdir()
    args = ["-i", "inventories/localhost.yml", "-e", json.dumps(params)]

    check = run_playbook(str(playbook), *args, check=True)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert not (tmp_path / "cni").exists() and not os.listdir(tmp_path / "sysctl.d")

    first = run_playbook(str(playbook), *args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert stats(first)["changed"] == 3  # modules-load.d, sysctl.d files, CNI config dir
    assert (tmp_path / "cni" / "config").is_dir()
    assert (tmp_path / "modules-load.d" / "backendai-cluster.conf").read_text().splitlines()[1:] == ["vxlan", "bridge"]
    assert "net.ipv4.ip_forward = %s" % forward in (tmp_path / "sysctl.d" / "90-backendai-cluster.conf").read_text()

    second = run_playbook(str(playbook), *args)
    assert second.returncode == 0 and stats(second)["changed"] == 0, second.stdout[-3000:]
    with open("/proc/sys/net/ipv4/ip_forward", encoding="ascii") as f:
        assert f.read().strip() == forward
