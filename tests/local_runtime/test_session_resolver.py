# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A session of this machine's own agent has no egress, so it is given no nameserver outside itself
(``_local.bringup``: ``NO_EGRESS_NAMESERVER``): a lookup of a name that ``/etc/hosts`` does not hold fails at once
instead of waiting out the resolver's timeouts, and no lookup leaves the session for an address it cannot reach.
Reverse lookups of the peers' IPv4-mapped addresses are such lookups: torch's c10d store makes one per client, and
with the machine's nameserver each cost 10 s of ``init_process_group`` here."""

from __future__ import annotations

import ipaddress
from typing import Any

#: the nameservers of a container's /etc/resolv.conf, and a reverse lookup of a peer's IPv4-mapped address
LOOKUP = r"""
import socket
servers = [line.split()[1] for line in open("/etc/resolv.conf") if line.split()[:1] == ["nameserver"]]
peer = "::ffff:" + socket.gethostbyname("sub1")
try:
    socket.getnameinfo((peer, 22, 0, 0), 0)
    found = "found"
except OSError as e:
    found = "not found: %s" % e
print(" ".join(servers) + "|" + found)
"""


def test_a_session_without_egress_has_only_a_loopback_nameserver(example_session: dict[str, Any], helpers: Any) -> None:
    p = helpers.ssh(example_session, "sub2", "python3 -c '%s'" % LOOKUP.replace("'", "'\\''"))
    assert p.returncode == 0, p.stderr
    servers, _sep, found = p.stdout.strip().rpartition("|")
    assert servers and all(ipaddress.ip_address(s).is_loopback for s in servers.split()), p.stdout
    assert found.startswith("not found"), p.stdout  # (answered by nobody: refused on the loopback)
