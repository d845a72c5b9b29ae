# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad model of the API double: state and behaviour, no HTTP (``../server.py`` serves it).

One concern per module, each citing the Nomad source it follows and saying what it leaves out:
``state`` (index, ACL token, region, namespaces, error forms), ``jobs`` (validation, register, deregister,
plan, views), ``diff`` (the plan's job diff), ``scheduler`` (feasibility, bin-packing, reconcile),
``allocs`` (allocations, task states, logs), ``evals`` (evaluations), ``nodes`` (client nodes),
``variables`` (variables and locks), ``gc`` (the servers' garbage collection) and ``tasks`` (a client's restarts of the tasks a test runs for real). It is not Nomad: no raft, no scheduler workers, no clients.
"""

from __future__ import annotations

from .allocs import AllocsModel
from .evals import EvalsModel
from .gc import GCModel
from .jobs import JobsModel
from .nodes import NodesModel
from .scheduler import SchedulerModel
from .state import CodedError, Conflict, ModelState
from .tasks import TasksModel
from .variables import VariablesModel

__all__ = ["CodedError", "Conflict", "ModelState", "NomadModel"]


class NomadModel(JobsModel, SchedulerModel, AllocsModel, EvalsModel, NodesModel, VariablesModel, TasksModel,
                 GCModel):
    """Everything the double knows, behind :attr:`lock` (the HTTP shell holds it while it serves a request)."""
