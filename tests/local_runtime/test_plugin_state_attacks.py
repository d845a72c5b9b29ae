"""Attacks on the ``backendai`` CNI plugin through its own state directory.

The plugin keeps each session's record (``sessions/<sid>.json``: its links, the delegated ``bridge`` plugin's
config) and each container's (``containers/<id>.json``: its session) and reads them back on DEL, as root, to run the
delegated plugin from CNI_PATH, delete links and remove the session's IPAM files. Were the state directory reachable
by a session (a mount through a symbolic link: ``tests/unit/plugins/modules/test_session_mount_sources.py``), a planted record could
choose the program the plugin runs and the files it removes. Each case plants such a record and runs the plugin's
DEL in a network namespace of its own (``unshare --net``: the agent-wide rules it removes on the last session are
that namespace's): the planted program never runs and nothing outside the state directory goes. The control is a
record as the plugin writes it, whose DEL runs its delegated plugin (a stand-in in CNI_PATH that leaves a mark).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs the plugin's DEL in a network namespace of its own")

COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "collections")
DEL = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_plugin as plugin
cfg = plugin.Config(json.loads(sys.argv[2]))
env = {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": sys.argv[3], "CNI_NETNS": "", "CNI_IFNAME": "eth0",
       "CNI_PATH": sys.argv[4], "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
try:
    plugin.cmd_del(cfg, env)
    print(json.dumps({"ok": True}))
except plugin.PluginError as e:
    print(json.dumps({"ok": False, "error": str(e.msg)}))
"""
MARK = "#!/bin/sh\necho \"$CNI_COMMAND\" >> %s\necho '{}'\n"


def _plant(root: str, sid: str, delegate_type: str = "bridge", record_at: str = "") -> dict[str, str]:
    """A state directory with one container of session ``sid`` and its session record (at ``record_at`` if given),
    a CNI path with a stand-in ``bridge`` plugin and a planted program ``evil`` beside it; what the DEL needs."""
    state, cni, outside = (os.path.join(root, d) for d in ("state", "cni", "outside"))
    for d in (os.path.join(state, "sessions"), os.path.join(state, "containers"), cni, outside):
        os.makedirs(d, exist_ok=True)
    marks = {name: os.path.join(root, name + ".ran") for name in ("bridge", "evil")}
    for name, where in (("bridge", cni), ("evil", outside)):
        with open(os.path.join(where, name), "w", encoding="utf-8") as f:
            f.write(MARK % marks[name])
        os.chmod(os.path.join(where, name), 0o755)
    with open(os.path.join(outside, "precious"), "w", encoding="utf-8") as f:
        f.write("keep me\n")
    cid = "c" + uuid.uuid4().hex
    bridge, vxlan = net.link_names(sid if net._is_uuid(sid) else str(uuid.uuid4()))
    record = {"sid": sid, "vni": 4100, "subnet": "10.203.0.0/24", "agents": ["10.0.0.1"], "mtu": 1450,
              "namespace": "default", "job": "x", "bridge": bridge, "vxlan": vxlan, "gateway": "10.203.0.1",
              "prefixlen": 24, "peers": [], "encryption": "none", "wg_key": "", "tunnel": "", "wg_peers": [],
              "delegate": {"cniVersion": "1.0.0", "name": "backendai", "type": delegate_type, "bridge": bridge,
                           "ipam": {"type": "host-local", "dataDir": os.path.join(state, "ipam", sid)}}}
    with open(record_at or os.path.join(state, "sessions", sid + ".json"), "w", encoding="utf-8") as f:
        json.dump(record, f)
    with open(os.path.join(state, "containers", cid + ".json"), "w", encoding="utf-8") as f:
        json.dump({"sid": sid, "ifname": "eth0", "alloc": "", "group": ""}, f)
    os.makedirs(os.path.join(state, "sessions", sid + ".d"), exist_ok=True)
    open(os.path.join(state, "sessions", sid + ".d", cid), "w").close()
    conf = {"underlayIP": "10.0.0.1", "stateDir": state, "keyFile": os.path.join(root, "network.key"),
            "identity": "local"}
    return {"conf": json.dumps(conf), "cid": cid, "cni": cni, "outside": outside, **marks}


def _del(p: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", DEL, COLLECTIONS, p["conf"], p["cid"],
                           p["cni"]], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_record_as_the_plugin_writes_it_runs_its_delegated_plugin(tmp_path) -> None:
    p = _plant(str(tmp_path), str(uuid.uuid4()))
    assert _del(p) == {"ok": True}
    assert os.path.exists(p["bridge"]) and not os.path.exists(p["evil"])


@pytest.mark.parametrize("planted", ["../outside/evil", "ABSOLUTE"])
def test_a_planted_delegated_plugin_type_never_runs(tmp_path, planted: str) -> None:
    """``"type": "../outside/evil"`` (joined onto the CNI path) and an absolute path (``os.path.join`` drops the
    directory before it): refused, neither the planted program nor the real plugin runs."""
    root = str(tmp_path)
    p = _plant(root, str(uuid.uuid4()), os.path.join(root, "outside", "evil") if planted == "ABSOLUTE" else planted)
    got = _del(p)
    assert not os.path.exists(p["evil"]), "the planted plugin ran as root on DEL"
    assert got["ok"] is False and ("not the plugin's" in str(got["error"]) or "not a plain name" in str(got["error"])), got


def test_a_planted_session_id_removes_nothing_outside_the_state_directory(tmp_path) -> None:
    """A container record naming session ``../../outside`` (with a record where that leads): the DEL would remove
    the session's IPAM directory, ``ipam/../../outside``; refused, the files there stay."""
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "state", "ipam"), exist_ok=True)
    p = _plant(root, "../../outside", record_at=os.path.join(root, "outside.json"))
    got = _del(p)
    assert os.path.exists(os.path.join(p["outside"], "precious")), "DEL removed files outside the state directory"
    assert got["ok"] is False and "names no session ID" in str(got["error"]), got
