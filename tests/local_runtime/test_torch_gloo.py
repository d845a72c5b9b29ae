"""Real PyTorch across a local session's containers (issue 18, test 5): ``torch.distributed`` with the gloo
backend and ``init_method="env://"``, one rank per container, started over ``ssh`` from main1 as the session
user, in engine containers of the example image, on this machine and behind two local agents (multi-node). It reads only what the session injects (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), resolves main1
and the ranks' own names inside the session network, and all_reduce must add every rank's value.

torch runs from the venv of ``tests/support/torch_venv.py`` (the machine's ``/usr/bin/python3``, Debian's, as the example
image's, with torch under the repository's ``.cache/``), which the session mounts read-only at ``~/torch-venv`` of the
session user as a user's job would mount its environment: a spec mount, from a mount root (``mount_roots``) that is the
venv's folder. So the containers reach it wherever the repository is cloned (under a 0700 home, under /tmp, which
containers have private), by the product's own means, not by where the clone happens to be. If it cannot be made the
test is skipped, except under CI (``CI`` set), where it fails.
"""
from __future__ import annotations

import base64
import os
import subprocess
import typing as t
import uuid

import pytest

import local_session_dict  # tests/support/local_session_dict.py: the example image, the Nomad job's renderer
import torch_venv  # tests/support/torch_venv.py: the venv of torch the sessions mount
from torch_venv import CACHE, VENV
from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local import local_backend


#: where the session mounts the venv: in the session user's home (each container's own, so nothing is made on the
#: machine); a venv runs from where its python is called (pyvenv.cfg sits beside bin/)
VENV_IN_CONTAINER = "/home/work/torch-venv"

ALL_REDUCE = r"""
import os, warnings
warnings.simplefilter("ignore")
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=__import__("datetime").timedelta(seconds=60))
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print("rank %d of %d sum %d uid %d" % (dist.get_rank(), dist.get_world_size(), int(value.item()), os.getuid()))
dist.destroy_process_group()
"""


def _torch_python() -> str:
    """The venv's python, once the venv is made (by ``scripts/run-tests`` beside the tests, or here)."""
    reason = torch_venv.ensure()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return torch_venv.PYTHON


@pytest.fixture(scope="module")
def torch_python() -> str:
    return _torch_python()


@pytest.mark.parametrize("mode", ["single-node", "multi-node"])
def test_gloo_all_reduce_across_containers_as_the_session_user(mode: str, torch_python: str, run_dir: str,
                                                               helpers: t.Any) -> None:
    before = helpers.host_snapshot()
    root = os.path.join(run_dir, uuid.uuid4().hex[:8])
    agents_root = os.path.join(run_dir, "agents-" + uuid.uuid4().hex[:8])
    hosts = ["main1", "sub1", "sub2"]
    spec = {"name": "gloo", "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": len(hosts), "cluster_mode": mode,
            "resources": {"cpu": 1400, "memory": 1024}, "master_port": 29500,  # (torch's import is CPU-bound)
            "mounts": [{"source": VENV, "target": VENV_IN_CONTAINER, "read_only": True}]}
    agents = None
    if mode == "multi-node":  # two local agents, neither of which holds the whole session
        agents = local_agents.create_agents([{"name": "agent%d" % i, "cpu": 3200, "memory": 2048} for i in (1, 2)],
                                            agents_root)["agents"]
    backend = local_backend.LocalBackend(root, mount_roots=[CACHE], task=local_session_dict.TASK)
    try:
        result = backend.present(spec, agents=agents)
        before.record(root, ["gloo"])
        assert result["session"]["mode"] == mode
        script = base64.b64encode(ALL_REDUCE.encode()).decode()
        # every rank at once, each over ssh from main1 (as mpirun or torchrun's ssh launchers do)
        p = subprocess.run(
            ["ssh", "-F", os.path.join(result["session"]["state_dir"], "ssh_config"), "main1",
             "for h in %s; do ssh $h 'echo %s | base64 -d | %s -' > ~/gloo.$h 2>&1 & done; wait; "
             "for h in %s; do echo $h: $(grep '^rank' ~/gloo.$h || cat ~/gloo.$h); rm ~/gloo.$h; done"
             % (" ".join(hosts), script, VENV_IN_CONTAINER + "/bin/python", " ".join(hosts))],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        total = sum(range(1, len(hosts) + 1))
        uid = "1000"  # the default session user, work
        assert lines == ["%s: rank %d of %d sum %d uid %s" % (h, i, len(hosts), total, uid)
                         for i, h in enumerate(hosts)], p.stdout
    finally:
        backend.absent("gloo")
        if agents is not None:
            local_agents.destroy_agents(agents_root)
    before.assert_clean()
