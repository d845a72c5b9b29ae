# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The environment of every container, as Backend.AI's cluster session docs define it.

Two tables are the contract (``BACKENDAI_CLUSTER_*`` and the PyTorch/TensorFlow variables); see
``docs`` in the repository. Values are split in two so that the Nomad job can hold the
session-wide ones once (job ``Meta``) and refer to them from every group:

* :func:`session_values` — the same in every container (HOSTS, SIZE, REPLICAS, ...);
* :func:`container_values` — this container's own (HOST, IDX, ROLE, ranks, KERNEL_ID, TF_CONFIG).

:func:`container_env` merges both with the user's ``env`` into the literal environment the
local runtime sets and the tests compare against. Pure.
"""

from __future__ import annotations

import json
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import Container, SessionPlan

#: Session-wide variables, in the order the job Meta lists them.
SESSION_VARIABLES = (
    "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_MODE", "BACKENDAI_CLUSTER_REPLICAS", "BACKENDAI_CLUSTER_SIZE",
    "BACKENDAI_SESSION_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
)


def tf_workers(plan: SessionPlan) -> t.List[str]:
    """TensorFlow's worker list: every container as ``host:MASTER_PORT``, in global order."""
    return ["%s:%d" % (h, plan.spec.master_port) for h in plan.hostnames]


#: ``TF_CONFIG`` in the seed's exact shape; ``%s`` is the JSON worker list, ``%d`` the rank. It equals
#: ``json.dumps({"cluster": {"worker": [...]}, "task": {"type": "worker", "index": rank}})``, and lets the
#: Nomad job substitute the list from Meta while each group keeps only its own index.
TF_CONFIG_FORMAT = '{"cluster": {"worker": %s}, "task": {"type": "worker", "index": %d}}'


def tf_workers_json(plan: SessionPlan) -> str:
    return json.dumps(tf_workers(plan))


def session_values(plan: SessionPlan) -> t.Dict[str, str]:
    size = str(len(plan.containers))
    return {
        "BACKENDAI_CLUSTER_HOSTS": ",".join(plan.hostnames),
        "BACKENDAI_CLUSTER_MODE": plan.mode,
        "BACKENDAI_CLUSTER_REPLICAS": plan.replicas,
        "BACKENDAI_CLUSTER_SIZE": size,
        "BACKENDAI_SESSION_ID": plan.session_id,
        "MASTER_ADDR": plan.containers[0].hostname,
        "MASTER_PORT": str(plan.spec.master_port),
        "WORLD_SIZE": size,
    }


def container_values(container: Container, workers_json: str) -> t.Dict[str, str]:
    """This container's own variables; ``workers_json`` is :func:`tf_workers_json` (or a reference to it)."""
    rank = str(container.rank)
    return {
        "BACKENDAI_CLUSTER_HOST": container.hostname,
        "BACKENDAI_CLUSTER_IDX": str(container.idx),
        "BACKENDAI_CLUSTER_LOCAL_RANK": rank,
        "BACKENDAI_CLUSTER_ROLE": container.role,
        "BACKENDAI_KERNEL_ID": container.kernel_id,
        "LOCAL_RANK": str(container.local_rank),
        "RANK": rank,
        "TF_CONFIG": TF_CONFIG_FORMAT % (workers_json, container.rank),
        "WORLD_RANK": rank,
    }


def container_env(plan: SessionPlan, container: Container) -> t.Dict[str, str]:
    """The full literal environment of one container (user env first; cluster variables win)."""
    env = dict(container.user_env)
    env.update(session_values(plan))
    env.update(container_values(container, tf_workers_json(plan)))
    return dict(sorted(env.items()))


def mpi_hostfile(plan: SessionPlan) -> str:
    """An OpenMPI hostfile for the session: ``main1 slots=S`` per container, in global order."""
    return "".join("%s slots=%d\n" % (h, plan.spec.mpi_slots) for h in plan.hostnames)
