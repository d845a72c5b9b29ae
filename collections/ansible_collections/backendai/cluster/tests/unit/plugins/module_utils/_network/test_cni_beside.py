# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a session's first ADD on an agent runs side by side (``_cni_system.beside``): the forwarding entries to its
peers beside its rules (``session_up``), the agent table beside the group's look-up (``_cni_plugin._admission``).
Both halves have ended when the call returns, whatever either did, and the foreground's error comes first. (The
kernel side of it, in real namespaces: tests/local_runtime/test_session_network_attacks.py and
test_session_network_table.py.)"""

from __future__ import annotations

import threading
import time
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system

SID = "0b7e8a52-93a3-4d6c-9f43-3a8d50c1b0e1"


def test_the_background_runs_in_another_thread_while_the_foreground_runs() -> None:
    started, seen = threading.Event(), []

    def background() -> str:
        seen.append(threading.get_ident())
        started.set()
        return "table"

    def foreground() -> None:  # waits for the background: one after the other would never get past this
        assert started.wait(10), "the background did not run while the foreground did"

    assert system.beside(background, foreground) == "table"
    assert seen and seen[0] != threading.get_ident()


def test_the_foregrounds_error_comes_first_and_the_background_has_ended_when_it_is_raised() -> None:
    ended = []

    def background() -> None:
        time.sleep(0.05)
        ended.append(True)
        raise system.PluginError(system.E_SYSTEM, "the background's")

    def foreground() -> None:
        raise system.PluginError(system.E_ADMISSION, "the foreground's")

    with pytest.raises(system.PluginError, match="the foreground's"):
        system.beside(background, foreground)
    assert ended == [True]


def test_the_backgrounds_error_is_raised_after_the_foreground_ended() -> None:
    done = []

    def background() -> None:
        raise OSError(19, "No such device")

    with pytest.raises(OSError, match="No such device"):
        system.beside(background, lambda: done.append(True))
    assert done == [True]


def test_without_a_thread_to_be_had_the_two_run_one_after_the_other(monkeypatch: t.Any) -> None:
    def no_thread(*_args: t.Any) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(system._thread, "start_new_thread", no_thread)
    order: t.List[str] = []
    assert system.beside(lambda: order.append("background") or 7, lambda: order.append("foreground")) == 7
    assert order == ["background", "foreground"]


def _state(encryption: str = "none", peers: int = 2) -> t.Dict[str, t.Any]:
    return {"sid": SID, "vxlan": "baix0", "encryption": encryption,
            "peers": ["192.0.2.%d" % (i + 2) for i in range(peers)],
            "wg_peers": [("key%d" % i, "fd00::%d" % (i + 2), "192.0.2.%d" % (i + 2)) for i in range(peers)]}


@pytest.mark.parametrize("encryption, dests", [("none", ["192.0.2.2", "192.0.2.3"]),
                                               ("wireguard", ["fd00::2", "fd00::3"])])
def test_the_vxlan_device_floods_to_each_peer_by_its_underlay_or_tunnel_address(monkeypatch: t.Any, encryption: str,
                                                                                dests: t.List[str]) -> None:
    sent: t.List[t.Tuple[str, t.List[str]]] = []
    monkeypatch.setattr(system, "fdb_append", lambda dev, to: sent.append((dev, list(to))))
    system.flood_up(_state(encryption))
    system.flood_up(_state(encryption, peers=0))  # a session on one agent: no VXLAN device, no entry
    assert sent == [("baix0", dests)]


def test_a_session_comes_up_with_links_then_entries_beside_rules_all_in_place_when_it_returns(
        monkeypatch: t.Any) -> None:
    events: t.List[str] = []
    entries_started = threading.Event()
    monkeypatch.setattr(system, "links_up", lambda cfg, st: events.append("links"))

    def fdb_append(dev: str, dests: t.Sequence[str]) -> None:
        events.append("entries started")
        entries_started.set()
        time.sleep(0.05)
        events.append("entries in place")

    def rules_up(cfg: t.Any, st: t.Any, first_session: bool) -> None:
        assert entries_started.wait(10), "the entries were not made beside the rules"
        events.append("rules in place (first session %s)" % first_session)

    monkeypatch.setattr(system, "fdb_append", fdb_append)
    monkeypatch.setattr(system, "rules_up", rules_up)
    system.session_up(t.cast(t.Any, None), _state(), first_session=True)
    assert events[:2] == ["links", "entries started"]
    assert sorted(events[2:]) == ["entries in place", "rules in place (first session True)"]


def test_a_session_whose_rules_fail_raises_their_error_once_its_entries_are_done(monkeypatch: t.Any) -> None:
    ended = []
    monkeypatch.setattr(system, "links_up", lambda cfg, st: None)

    def fdb_append(dev: str, dests: t.Sequence[str]) -> None:
        time.sleep(0.05)
        ended.append(dev)
        raise system.NetlinkError(19, "fdb append dev %s" % dev)

    def rules_up(cfg: t.Any, st: t.Any, first_session: bool) -> None:
        raise system.PluginError(system.E_SYSTEM, "iptables-restore -w --noflush failed")

    monkeypatch.setattr(system, "fdb_append", fdb_append)
    monkeypatch.setattr(system, "rules_up", rules_up)
    with pytest.raises(system.PluginError, match="iptables-restore"):
        system.session_up(t.cast(t.Any, None), _state(), first_session=False)
    assert ended == ["baix0"]  # (so the teardown that follows never races the entries)
    monkeypatch.setattr(system, "rules_up", lambda cfg, st, first_session: None)
    with pytest.raises(system.NetlinkError, match="fdb append dev baix0"):
        system.session_up(t.cast(t.Any, None), _state(), first_session=False)
