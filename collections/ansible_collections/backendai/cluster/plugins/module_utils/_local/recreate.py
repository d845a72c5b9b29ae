# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bringing back an engine container that was removed under a running session (docs/failure-policy.md).

The local backend has no daemon: nothing of the session runs outside its containers, and a container's supervisor
cannot start engine containers (it runs inside one, without the engine). So a removed container comes back when
``state: present`` runs: under ``restart_all``/``restart_one``, when every other container still runs (or waits for
the gang), :func:`recreate_gone` runs ``podman run`` again with the arguments the bring-up started it with
(:func:`save_run`, ``<container dir>/engine-run.json``): the same name, network namespace (hence address), task and
allocation directories, keys and log. Its supervisor then joins the gang (at the gang's generation, which the first
answer of a peer carries), and the others' barrier lets every command start again. This is what Nomad does for a lost
allocation (a replacement on the same agent, which joins the gang the same way); the rest of the session is untouched.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import inspect_containers, podman
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths, read_json

#: The bring-up's ``podman run`` arguments of a container, under its directory.
ENGINE_RUN_FILE = "engine-run.json"
#: The policies under which a removed container is brought back into the running gang (the others wait for it).
REJOINING_POLICIES = ("restart_all", "restart_one")
#: Container statuses of the others that let a removed one rejoin (the gang waits for it, or runs without it).
WAITING = ("running", "restarting")


def save_run(container_dir: str, argv: t.Sequence[str]) -> None:
    """Keep a container's ``podman run`` arguments (``run --detach ...``) for :func:`recreate_gone`."""
    write_file(os.path.join(container_dir, ENGINE_RUN_FILE), json.dumps(list(argv)), mode=0o600)


def gone_hosts(paths: SessionPaths, status: t.Mapping[str, t.Any]) -> t.List[str]:
    """The hosts whose engine container podman no longer has, when every other container runs or waits for the gang
    and each gone one can be started again (its arguments were kept); else [] (``present`` recreates the session)."""
    info = read_json(paths.session_json)
    if not isinstance(info, dict) or not (info.get("engine") or {}).get("conf"):
        return []
    engines = {c["hostname"]: c["engine"] for c in info.get("containers") or []}
    present = inspect_containers(list(engines.values()), info["engine"]["conf"], "{{.State.Status}}")
    gone = [h for h, e in engines.items() if e not in present]
    others = [c["state"] for c in status.get("containers") or [] if c["hostname"] not in gone]
    if not gone or not others or any(s not in WAITING for s in others):
        return []
    if not all(os.path.isfile(os.path.join(paths.container_dir(h), ENGINE_RUN_FILE)) for h in gone):
        return []
    return gone


def recreate_gone(paths: SessionPaths, hosts: t.Sequence[str]) -> None:
    """``podman run`` again each of ``hosts``' engine containers with its kept arguments (:func:`save_run`)."""
    info = read_json(paths.session_json) or {}
    conf = info["engine"]["conf"]
    for host in hosts:
        cdir = paths.container_dir(host)
        with open(os.path.join(cdir, ENGINE_RUN_FILE), encoding="utf-8") as f:
            argv = json.load(f)
        if "--cidfile" in argv:  # the removed container's ID file: podman run refuses to write over one
            cidfile = argv[argv.index("--cidfile") + 1]
            if os.path.exists(cidfile):
                os.unlink(cidfile)
        podman(argv, conf, cwd=cdir, what="podman run of removed container %s" % host, owner=paths.root)
