# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local backend shows of a session's failure policy: each container's gang status file
(``_session.gang.STATUS_FILE`` under its allocation directory, which the container's supervisor writes) read from
this machine into the container statuses and one summary for the session (``_session.gang.apply_status``)."""

from __future__ import annotations

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths, read_text
from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import STATUS_FILE, apply_status, parse_status

#: What the docker driver binds at /alloc, under each container's directory (``_local.bringup``).
ALLOC_SUBDIR = "alloc"


def apply_gang_status(paths: SessionPaths, containers: t.List[t.Dict[str, t.Any]]) -> t.Optional[t.Dict[str, t.Any]]:
    """``_session.gang.apply_status`` with the status files of the runtime's container statuses (``state``)."""
    gangs = {}
    for c in containers:
        text = read_text(os.path.join(paths.container_dir(c["hostname"]), ALLOC_SUBDIR, STATUS_FILE))
        if text:
            gangs[c["hostname"]] = parse_status(text)
    return apply_status(containers, gangs, key="state")
