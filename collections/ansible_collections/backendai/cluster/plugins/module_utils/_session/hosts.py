# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a container's ``/etc/hosts`` follows its peers: one small POSIX ``sh`` script, used by both backends.

``sh hosts.sh PEERS [HOSTS]`` rewrites the block between :data:`BEGIN` and :data:`END` in ``HOSTS``
(default ``/etc/hosts``) with the lines of ``PEERS`` (``ADDRESS NAME`` each) and keeps every other line.
It is safe to run again and again: a run with the same peers writes the same file.

* Nomad: the peers file is a template over the session's service registrations (``nomadService``);
  when an allocation is replaced (lost node, repair) its registration changes, Nomad renders the file
  again and runs this script in the task (template ``change_mode = "script"``), so every peer's
  ``/etc/hosts`` gets the new address (``_nomad.job``).
* local: the runtime writes the session's hosts file, which every container has bind-mounted as
  ``/etc/hosts``, with :func:`hosts_text` (what the script writes, made in Python: no ``sh`` run), once per
  session before its containers start (``_local.bringup``).

The file is rewritten in place (truncate and write), never renamed over: ``/etc/hosts`` is a bind
mount in a container, and a new file renamed over the host's copy would not reach the container.
A reader during the rewrite can see a short file for an instant; resolvers read it again on the
next lookup. Only ``sh`` builtins and ``cat`` are used, so any image (busybox included) runs it.
"""

from __future__ import annotations

import typing as t

BEGIN = "# backendai.cluster peers: begin"
END = "# backendai.cluster peers: end"

HOSTS_SCRIPT = r"""#!/bin/sh
# backendai.cluster: rewrite the peers block of a hosts file in place from a peers file (ADDRESS NAME lines).
set -eu
P=$1 H=${2:-/etc/hosts} B='%(begin)s' E='%(end)s'
[ -r "$P" ] || { echo "backendai: peers file $P missing" >&2; exit 66; }
K= N='
' in=0
if [ -f "$H" ]; then
  while IFS= read -r l || [ -n "$l" ]; do
    case $l in "$B") in=1; continue ;; "$E") in=0; continue ;; esac
    [ $in = 1 ] || K="$K$l$N"
  done < "$H"
fi
{ printf '%%s' "$K"; echo "$B"; cat "$P"; echo "$E"; } > "$H"
""" % {"begin": BEGIN, "end": END}


def peers_text(addresses: t.Mapping[str, str]) -> str:
    """The peers file for hostname -> address (in the given order): one ``ADDRESS NAME`` line each."""
    return "".join("%s %s\n" % (address, host) for host, address in addresses.items())


def hosts_text(base: str, addresses: t.Mapping[str, str]) -> str:
    """A hosts file of the lines ``base`` (which has no peers block) and the peers block of ``addresses``: what
    :data:`HOSTS_SCRIPT` makes of a hosts file holding ``base``."""
    return base + BEGIN + "\n" + peers_text(addresses) + END + "\n"
