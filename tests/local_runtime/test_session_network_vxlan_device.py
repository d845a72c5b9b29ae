"""The session's VXLAN device the plugin makes over netlink (``_cni_system.vxlan_add``) is the device ``ip link add
... type vxlan`` makes, in the kernel: both made in a namespace of the test's own, their details (``ip -d -j link
show``: MTU, state, every VXLAN attribute the kernel reports, defaults included) compared. Plain (local underlay
address) and as a session inside WireGuard makes it (local tunnel address, bound to a device). The byte format: the
collection's unit test ``test_cni_vxlan_netlink.py``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def details(ns: str, name: str) -> t.Dict[str, t.Any]:
    (link,) = json.loads(subprocess.run(["ip", "-n", ns, "-d", "-j", "link", "show", "dev", name], check=True,
                                        capture_output=True, text=True).stdout)
    return {"mtu": link["mtu"], "flags": link["flags"], "operstate": link["operstate"],
            "linkinfo": link["linkinfo"], "link": link.get("link")}


@pytest.mark.parametrize("local, dev", [("10.77.0.1", ""), ("fd00:77::1", "baitdev0")])
def test_the_plugins_vxlan_device_is_ips(local: str, dev: str) -> None:
    ns = "bai-t-vx-%s" % uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "baitdev0", "mtu", "1600", "type", "bridge"], check=True)
        by_ip = ["ip", "-n", ns, "link", "add", "baitvxip", "mtu", "1450", "type", "vxlan", "id", "65921", "local", local,
                 "dstport", "4789"] + (["dev", dev] if dev else [])
        subprocess.run(by_ip, check=True)
        code = ("from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as s; "
                "s.vxlan_add('baitvxnl', 1450, 65922, %r, 4789, %r)" % (local, dev))
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], check=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections")))
        ours, ips = details(ns, "baitvxnl"), details(ns, "baitvxip")
        assert ours["linkinfo"]["info_data"].pop("id") == 65922 and ips["linkinfo"]["info_data"].pop("id") == 65921
        assert ours == ips
        assert ours["linkinfo"]["info_kind"] == "vxlan" and ours["mtu"] == 1450 and "UP" not in ours["flags"]
        assert ours["linkinfo"]["info_data"]["port"] == 4789
        # made again: refused as ip refuses it (EXCL), the device left as it was
        again = code.replace("s.vxlan_add", "\ntry:\n    s.vxlan_add") + "\nexcept s.NetlinkError as e:\n    print(e.msg, e.details)"
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", again], check=True, capture_output=True,
                             text=True, env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections"))).stdout
        assert out.strip() == "ip link add baitvxnl type vxlan failed File exists", out
        assert details(ns, "baitvxnl") == dict(ours, linkinfo=dict(ours["linkinfo"], info_data=dict(
            ours["linkinfo"]["info_data"], id=65922)))
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
