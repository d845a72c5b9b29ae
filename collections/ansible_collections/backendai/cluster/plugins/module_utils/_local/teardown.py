# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Undoing a local session: its journal replayed backwards (a failed create, or destroy)."""
from __future__ import annotations

import contextlib
import os
import shutil
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local import agent_network as _local_network
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (
    prune_shared_chains,
)
from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import inspect_containers, podman
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import delete_netns, kill_session_processes
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    LocalRuntimeError,
    SessionPaths,
)


def teardown(paths: SessionPaths, entries: t.List[t.Dict[str, t.Any]], keep_logs: bool,
             keep: t.Sequence[str] = ()) -> t.List[str]:
    """Undo the journal's side effects, newest first; remove the state dir if all went (with ``keep_logs``, all but
    the logs, session.json and the names in ``keep``: what a stopped session keeps)."""
    begin = next((e for e in entries if e["op"] == "begin"), None)
    # First every process of the session: containers, and whatever a killed creator left
    # running (a CNI plugin finishing its ADD after our DEL would leave its rules behind).
    errors = kill_session_processes(begin["netns"] if begin else [], paths.root)
    if errors:
        return errors
    for entry in entries:  # the engine's containers before the network they are attached to (recorded before it)
        if entry["op"] == "engine":
            if keep_logs:
                _keep_exit_codes(paths, entry["containers"], entry["conf"])
            errors += remove_containers(entry["containers"], entry["conf"])
    # and what a start in flight made meanwhile: podman gives conmon an environment of its own, without the session's
    # tag, so the conmon of a podman run killed above goes on to start its container (a runc init in the session's
    # namespace). Conmon itself is left alone: it removes the container's cgroups when its process ends (podman rm
    # after a killed conmon leaves them behind).
    errors += kill_session_processes(begin["netns"] if begin else [], paths.root)
    for entry in reversed(entries):
        op = entry["op"]
        if op == "network":
            errors += _local_network.network_down(paths, entry)
        elif op == "slot" and not errors:  # only once the session's network is gone from every agent
            _local_network.release_slots(entry["slots_dir"], entry["owner"])
        elif op == "netns":
            errors += delete_netns(entry["names"])
    if errors:
        return errors
    if any(e["op"] == "network" for e in entries):
        # After our own network is gone: of concurrent destroys, the last one prunes.
        with contextlib.suppress(LocalRuntimeError):
            prune_shared_chains()
    if keep_logs:
        for name in os.listdir(paths.root):
            if name not in ("logs", "session.json") and name not in keep:
                path = os.path.join(paths.root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
    else:
        shutil.rmtree(paths.root)
    return []


def _keep_exit_codes(paths: SessionPaths, names: t.List[str], conf: str) -> None:
    """Beside the kept logs, each ended engine container's exit code (``logs/<host>.exitcode``: the status of a session
    whose containers are gone reads it), before the containers go. A container is named ``bai-<digest>-<host>``."""
    for name, fields in inspect_containers(names, conf, "{{.State.Status}} {{.State.ExitCode}}").items():
        if len(fields) == 2 and fields[0] in ("exited", "stopped") and name.count("-") >= 2:
            write_file(paths.exitcode(name.split("-", 2)[2]), fields[1] + "\n", mode=0o644)


#: How many times ``podman rm`` is tried (see :func:`remove_containers`).
RM_ATTEMPTS = 3


def remove_containers(names: t.List[str], conf: str) -> t.List[str]:
    """``podman rm --force`` of the session's engine containers and their storage (anonymous volumes too); one that
    is not there (never made: a create killed before its start) is no error. Images stay.

    The containers' processes were killed just before (``kill_session_processes``), so podman may still be recording
    their exit (conmon's cleanup) while ``rm`` stops them: podman 4.3 then fails that container ("could not be
    stopped: ... container state improper: stopped", seen at 64 containers under load) and removes the others; ``rm``
    is tried again for what is left, once the exit is recorded."""
    if not names:
        return []
    for attempt in range(RM_ATTEMPTS):
        got = podman(["rm", "--force", "--ignore", "--volumes", "--time", "0"] + names, conf, check=False)
        if got.returncode == 0:
            return []
        if attempt + 1 < RM_ATTEMPTS:
            time.sleep(0.2 * (attempt + 1))
    return ["podman rm %s: %s" % (" ".join(names), got.stderr.decode(errors="replace").strip())]
