# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role backendai.cluster.overlay_agent (one-time agent preparation) on this machine, with every file it
writes redirected to a temporary directory and the sysctls set to the values they already have (so nothing of
the host changes): check mode changes nothing; the first run makes the cluster network key on the "control
node" (once), installs on the agent only the key derived for the agent's name (0600; the cluster key copied there
by an earlier release is removed), the Nomad token (0600), the plugin's files, the "backendai" shim and exactly
_session_network.static_conflist(); the second run changes nothing; no key or token is ever printed. A Nomad
client older than 1.10 (or one whose version cannot be read) is refused before anything is written."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
import typing as t

import pytest

from leaks import OWN_NETNS_ENV
from repo_helpers import REPO, run_playbook

from ansible_collections.backendai.cluster.plugins.module_utils._network._cni_plugin import SHIM
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    RUNTIME_VERSION,
    RUNTIME_VOLUME,
    host_volume_name,
)
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    derive_agent_key,
    read_key,
    static_conflist,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/portmap"),
                                reason="needs root and the CNI plugins (scripts/setup)")
#: ansible-playbook runs (not in scripts/run-tests --quick). The test that lets the role probe for WireGuard (a link),
#: load kernel modules and read and write sysctls runs the role in a network namespace of its own (``own_netns``), so
#: the probe's link and the network sysctls are that namespace's, and it needs no machine lock (the modules it loads,
#: vxlan and bridge, are machine-wide but change no link, rule or sysctl); the others give the role a WireGuard mode,
#: no module and no sysctl (``role_params``). Everything they make is under their tmp_path and they run beside the
#: machine tests.
pytestmark = [pytest.mark.slow, needs_root]

PLAYBOOK = """
- name: Prepare this machine as an agent
  hosts: localhost
  gather_facts: false
  roles:
    - backendai.cluster.overlay_agent
"""
MODULE_UTILS = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "plugins", "module_utils", "_network")
# Stands in for the real _cni_plugin.py: shows that the shim runs it from the plugin dir, isolated (-IS).
FAKE_PLUGIN = """import json, sys
import _cni_system, _session_network
def main():
    print(json.dumps({"network": _session_network.NETWORK_NAME, "no_user_site": sys.flags.no_user_site,
                      "ignore_environment": sys.flags.ignore_environment, "from": __file__}))
    return 3
"""


NOMAD_TOKEN = "3b1c5a2e-7d4f-4e21-9c0a-read-job-only"


def fake_nomad(directory: t.Any, version_line: str) -> str:
    """A ``nomad`` whose ``nomad version`` prints what Nomad's CLI prints (``command/version.go``)."""
    path = directory / "nomad"
    path.write_text("#!/bin/sh\nprintf '%s\\nBuildDate 2025-04-08T16:28:17Z\\nRevision 0000000\\n'\n" % version_line)
    path.chmod(0o755)
    return str(path)


def stats(proc: t.Any) -> t.Dict[str, t.Any]:
    return json.loads(proc.stdout)["stats"]["localhost"]


@contextlib.contextmanager
def own_netns() -> t.Iterator[t.List[str]]:
    """A network namespace of the test's own (held by a ``sleep`` that ``unshare`` started in it, named nowhere, so no
    other test sees it; it goes with the process): the command prefix that runs a command in it."""
    # (marked for the machine tests' leak check, which would take what runs here for another test's leftover)
    holder = subprocess.Popen(["unshare", "--net", "sleep", "600"], env=dict(os.environ, **{OWN_NETNS_ENV: "1"}))
    try:
        ours, theirs = os.readlink("/proc/self/ns/net"), "/proc/%d/ns/net" % holder.pid
        for _ in range(500):  # until unshare has made it and exec'd sleep
            if os.readlink(theirs) != ours and os.path.basename(os.readlink("/proc/%d/exe" % holder.pid)) == "sleep":
                break
            time.sleep(0.01)
        else:
            raise AssertionError("unshare --net did not make a network namespace")
        yield ["nsenter", "--net=" + theirs, "--"]
    finally:
        holder.kill()
        holder.wait()


def ip_forward(prefix: t.Sequence[str] = ()) -> str:
    return subprocess.run(list(prefix) + ["cat", "/proc/sys/net/ipv4/ip_forward"], capture_output=True, text=True,
                          check=True).stdout.strip()


def role_params(tmp_path: t.Any, nomad_version_line: str = "Nomad v1.10.5", machine: bool = False,
                forward: str = "") -> t.Dict[str, t.Any]:
    """The role's variables with every file it writes under ``tmp_path``; with ``machine``, the role also probes for
    WireGuard, loads its kernel modules and sets net.ipv4.ip_forward to ``forward`` (the value it has in the namespace
    the role runs in, so nothing changes), else it is given the WireGuard mode and no module or sysctl, and touches
    nothing outside ``tmp_path``."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("_session_network.py", "_cni_system.py", "_cni_nomad.py"):
        (source / name).write_text(open(os.path.join(MODULE_UTILS, name)).read())
    (source / "_cni_plugin.py").write_text(FAKE_PLUGIN)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for plugin in ("loopback", "portmap"):
        os.symlink("/usr/lib/cni/" + plugin, bin_dir / plugin)
    (tmp_path / "etc").mkdir(mode=0o700)
    (tmp_path / "modules-load.d").mkdir()
    (tmp_path / "sysctl.d").mkdir()
    return {
        "ansible_python_interpreter": sys.executable,
        "overlay_agent_cni_install": False,  # (no apt here; the plugins are checked)
        "overlay_agent_cni_bin_dir": str(bin_dir),
        "overlay_agent_cni_config_dir": str(tmp_path / "cni" / "config"),
        "overlay_agent_plugin_dir": str(tmp_path / "lib"),
        "overlay_agent_plugin_source_dir": str(source),
        "overlay_agent_state_dir": str(tmp_path / "state"),
        "overlay_agent_key_control_file": str(tmp_path / "control" / "network.key"),
        "overlay_agent_key_file": str(tmp_path / "etc" / "agent.key"),
        "overlay_agent_legacy_key_file": str(tmp_path / "etc" / "network.key"),
        "overlay_agent_name": "node-a",
        "overlay_agent_nomad_bin": fake_nomad(tmp_path, nomad_version_line) if nomad_version_line
        else str(tmp_path / "no-nomad"),
        "overlay_agent_nomad_token": NOMAD_TOKEN,
        "overlay_agent_nomad_token_file": str(tmp_path / "etc" / "nomad.token"),
        "overlay_agent_underlay_ip": "192.0.2.10",
        "overlay_agent_underlay_mtu": 9000,
        "overlay_agent_uplinks": ["eth9"],
        "overlay_agent_modules_file": str(tmp_path / "modules-load.d" / "backendai-cluster.conf"),
        "overlay_agent_sysctl_file": str(tmp_path / "sysctl.d" / "90-backendai-cluster.conf"),
        "overlay_agent_kernel_modules": ["vxlan", "bridge"],
        "overlay_agent_sysctls": {"net.ipv4.ip_forward": forward or "0"},
        "overlay_agent_nomad_config_dir": str(tmp_path / "nomad.d"),
        "overlay_agent_runtime_install": False,  # (no apt here; OpenSSH and busybox-static are installed)
        "overlay_agent_runtime_dir": str(tmp_path / "runtime"),
        **({} if machine else {"overlay_agent_wireguard_mode": "userspace", "overlay_agent_kernel_modules": [],
                               "overlay_agent_sysctls": {}}),
    }


def test_prepare_is_check_mode_safe_idempotent_and_keeps_the_key_secret(tmp_path: t.Any) -> None:
    with own_netns() as netns:
        _prepare_is_check_mode_safe_idempotent_and_keeps_the_key_secret(tmp_path, netns)


def _prepare_is_check_mode_safe_idempotent_and_keeps_the_key_secret(tmp_path: t.Any, netns: t.List[str]) -> None:
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    forward = ip_forward(netns)
    params = role_params(tmp_path, machine=True, forward=forward)
    bin_dir = tmp_path / "bin"
    control_key = tmp_path / "control" / "network.key"
    agent_key = tmp_path / "etc" / "agent.key"
    legacy_key = tmp_path / "etc" / "network.key"
    token_file = tmp_path / "etc" / "nomad.token"
    legacy_key.write_text("00" * 32 + "\n")  # the cluster key an earlier release copied to agents
    args = ["-i", "inventories/localhost.yml", "-e", json.dumps(params)]

    check = run_playbook(str(playbook), *args, check=True, prefix=netns)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert not control_key.exists() and not agent_key.exists() and not (tmp_path / "lib").exists()
    assert legacy_key.exists() and not token_file.exists()
    assert not (bin_dir / "backendai").exists() and not os.listdir(tmp_path / "sysctl.d")
    assert not (tmp_path / "runtime").exists()

    first = run_playbook(str(playbook), "-v", *args, prefix=netns)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    key_text = control_key.read_text().strip()
    assert len(key_text) == 64 and read_key(str(agent_key)) == derive_agent_key(read_key(str(control_key)), "node-a")
    assert read_key(str(agent_key)) != read_key(str(control_key)) and not legacy_key.exists()
    assert token_file.read_text().strip() == NOMAD_TOKEN
    for secret in (control_key, agent_key, token_file):
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600, secret
    assert stat.S_IMODE(os.stat(agent_key.parent).st_mode) == 0o700
    with open(tmp_path / "cni" / "config" / "backendai.conflist", encoding="utf-8") as f:
        assert json.load(f) == static_conflist("192.0.2.10", str(agent_key), str(tmp_path / "state"), egress=True,
                                               uplinks=["eth9"], underlay_mtu=9000, agent_name="node-a",
                                               nomad_token_file=str(token_file),
                                               wireguard_mode="kernel" if os.path.isdir("/sys/module/wireguard") else "userspace")
    shim = bin_dir / "backendai"
    assert stat.S_IMODE(os.stat(shim).st_mode) == 0o755
    assert shim.read_text() == SHIM % {"lib": str(tmp_path / "lib")}  # the local backend installs the same
    ran = subprocess.run([str(shim)], capture_output=True, text=True, env={"PYTHONPATH": "/nowhere"})
    assert ran.returncode == 3, ran.stderr
    assert json.loads(ran.stdout) == {"network": "backendai", "no_user_site": 1, "ignore_environment": 1,
                                      "from": str(tmp_path / "lib" / "_cni_plugin.py")}
    assert (tmp_path / "modules-load.d" / "backendai-cluster.conf").read_text().splitlines()[1:] == ["vxlan", "bridge"]
    # the session runtime bundle, of the version the jobs mount, declared as that read-only host volume
    bundle = tmp_path / "runtime" / RUNTIME_VERSION
    assert bundle.is_symlink() and (bundle / "VERSION").read_text() == RUNTIME_VERSION + "\n"
    assert all(os.access(bundle / "bin" / x, os.X_OK) for x in ("sshd", "ssh", "scp", "sh"))
    declared = (tmp_path / "nomad.d" / "backendai-runtime.hcl").read_text()
    assert 'host_volume "%s" {\n    path      = "%s"\n    read_only = true' % (RUNTIME_VOLUME, bundle) in declared

    second = run_playbook(str(playbook), *args, prefix=netns)
    assert second.returncode == 0 and stats(second)["changed"] == 0, second.stdout[-3000:]
    assert control_key.read_text().strip() == key_text  # made once, never replaced
    agent_text = agent_key.read_text().strip()
    for proc in (check, first, second):
        for piece in (key_text, key_text[:16], key_text[-16:], agent_text[:16], agent_text[-16:], NOMAD_TOKEN):
            assert piece not in proc.stdout + proc.stderr
    assert ip_forward(netns) == forward


def test_data_roots_become_nomad_host_volumes_and_key_paths_are_refused(tmp_path: t.Any) -> None:
    """The data roots given are declared to the Nomad client as host volumes named as the job renderer names a
    spec mount's source; a root that is, holds or lies in the key, plugin or state directories is refused before
    anything is written, and nothing is declared."""
    hcl2 = pytest.importorskip("hcl2")
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    params = role_params(tmp_path)
    (tmp_path / "nomad.d").mkdir()
    data, ro = tmp_path / "srv" / "datasets", tmp_path / "srv" / "Models-2"
    data.mkdir(parents=True)
    ro.mkdir()
    roots = [{"path": str(data)}, {"path": str(ro), "read_only": True}]
    first = run_playbook(str(playbook), *["-i", "inventories/localhost.yml", "-e", json.dumps(dict(params, overlay_agent_data_roots=roots))])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    declared = tmp_path / "nomad.d" / "backendai-host-volumes.hcl"
    volumes = {}
    for block in hcl2.loads(declared.read_text())["client"][0]["host_volume"]:
        ((name, body),) = block.items()
        volumes[name.strip('"')] = (body["path"].strip('"'), body["read_only"])
    assert volumes == {host_volume_name(str(data)): (str(data), False), host_volume_name(str(ro)): (str(ro), True)}

    for bad in (str(tmp_path / "etc"), str(tmp_path / "etc" / "sub"), str(tmp_path), "/etc", "/run", "/"):
        refused = run_playbook(str(playbook), *["-i", "inventories/localhost.yml", "-e",
                                                json.dumps(dict(params, overlay_agent_data_roots=[{"path": bad}]))])
        assert refused.returncode != 0, bad
        assert "overlay_agent_data_roots: %s must be an absolute path of plain names" % bad in refused.stdout, refused.stdout[-3000:]
        assert host_volume_name(str(data)) in declared.read_text()  # the earlier declaration is left as it was

    # through links: the system's own (/var/run -> /run, /lib -> usr/lib) and one of the operator's, a link to the
    # plugin's state; /var (above the Nomad client's data) and the Nomad data dir itself
    (tmp_path / "srv" / "state-link").symlink_to(tmp_path / "state")
    for bad in ("/var/run/backendai-cluster", "/lib/cni", str(tmp_path / "srv" / "state-link"), "/var",
                "/opt/nomad/data"):
        refused = run_playbook(str(playbook), *["-i", "inventories/localhost.yml", "-e",
                                                json.dumps(dict(params, overlay_agent_data_roots=[{"path": bad}]))])
        assert refused.returncode != 0, bad
        assert "overlay_agent_data_roots: %s " % bad in refused.stdout, refused.stdout[-3000:]
        assert host_volume_name(str(data)) in declared.read_text()

    none = run_playbook(str(playbook), *["-i", "inventories/localhost.yml", "-e", json.dumps(params)])
    assert none.returncode == 0 and not declared.exists()

    # on an agent the role never prepared, a refused root leaves nothing: it is checked before anything is written
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    fresh_params = role_params(fresh)
    refused = run_playbook(str(playbook), *["-i", "inventories/localhost.yml", "-e",
                                            json.dumps(dict(fresh_params, overlay_agent_data_roots=[{"path": "/etc"}]))])
    assert refused.returncode != 0 and "overlay_agent_data_roots: /etc " in refused.stdout, refused.stdout[-3000:]
    assert not (fresh / "lib").exists() and not (fresh / "control").exists() and not (fresh / "cni").exists()
    assert os.listdir(fresh / "etc") == [] and not (fresh / "runtime").exists() and not (fresh / "nomad.d").exists()


@pytest.mark.parametrize("version_line, found", [
    ("Nomad v1.9.7", "is 1.9.7"),
    ("Nomad v1.8.12+ent", "is 1.8.12"),
    ("", "Cannot tell the Nomad client version"),
])
def test_a_nomad_client_older_than_1_10_is_refused_before_anything_is_written(
        tmp_path: t.Any, version_line: str, found: str) -> None:
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    params = role_params(tmp_path, version_line)
    proc = run_playbook(str(playbook), "-i", "inventories/localhost.yml", "-e", json.dumps(params))
    assert proc.returncode != 0
    assert found in proc.stdout and "session networks need Nomad 1.10.0 or later" in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "lib").exists() and not (tmp_path / "control").exists()
    assert os.listdir(tmp_path / "etc") == [] and not (tmp_path / "cni").exists()


def test_plain_http_to_nomad_off_loopback_is_refused_before_anything_is_written(tmp_path: t.Any) -> None:
    """The plugin would send its token in clear to whatever answers there: refused unless the operator opts in."""
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    params = dict(role_params(tmp_path), overlay_agent_nomad_addr="http://192.0.2.7:4646")
    proc = run_playbook(str(playbook), "-i", "inventories/localhost.yml", "-e", json.dumps(params), check=True)
    assert proc.returncode != 0
    assert "is plain http to an address off loopback" in proc.stdout, proc.stdout[-3000:]
    assert NOMAD_TOKEN not in proc.stdout + proc.stderr
    assert not (tmp_path / "lib").exists() and os.listdir(tmp_path / "etc") == []
    opted = run_playbook(str(playbook), "-i", "inventories/localhost.yml", "-e",
                         json.dumps(dict(params, overlay_agent_nomad_allow_plain_http=True)), check=True)
    assert opted.returncode == 0, opted.stdout[-3000:]
