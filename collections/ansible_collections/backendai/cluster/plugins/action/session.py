# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``backendai.cluster.session``: a local session runs the module in the worker process.

A session of the local backend is made on the controller itself. Run as a module, Ansible packs
``session`` into an AnsiballZ payload and starts a second Python process on the same machine, which
imports Ansible's module code and this collection all over again: that was about 2 s of the 2.4 s
``playbooks/create_session.yml`` took over an empty playbook (``benchmarks/playbook_overhead.py``).
For such a task this plugin does what the AnsiballZ wrapper does - hand the module its JSON arguments
through ``ansible.module_utils.basic`` and call its ``main()`` - but in Ansible's worker process (a
throw-away fork per task), and reads the module's JSON result as for any module run.

It is the module's own code that runs, so everything it does is kept exactly: argument validation
and its error messages, defaults and environment fallbacks, check and diff mode, expected errors
without a traceback, ``no_log`` values masked in the result, warnings and ``invocation``. The task's
arguments arrive after Ansible applied ``module_defaults`` (the ``group/backendai.cluster.nomad``
group included), and the task's ``environment`` is set in the worker as the module's process would
have it.

Only a task that would run the module on this machine, under the Python of ansible-playbook, for
the local backend, runs here: ``connection: local``, no ``become``, ``async`` or ``delegate_to``, an
``ansible_python_interpreter`` that is unset, discovered (``auto``) or ansible-playbook's own, and
no Nomad address (``backend: local``; or no ``backend`` and neither ``nomad_addr`` nor NOMAD_ADDR).
Every other task - a Nomad session, a remote or delegated host, become, async, another interpreter,
an ansible-core older than 2.19 - runs the module as usual.

In the worker the module and the module_utils it imports are loaded from their byte code
(``__pycache__``, :class:`_ByteCodeFinder`), as Python loads any installed package, instead of through
Ansible's collection loader, which compiles every collection module from source on every import: the
local backend's module_utils are ~0.5 MB of source, and compiling them took 0.14-0.22 s of every session
task (create and destroy alike) against ~0.04 s from byte code (benchmarks/playbook_overhead.py
--breakdown). The byte code is written where Python writes it (not with PYTHONDONTWRITEBYTECODE set;
``scripts/setup`` byte-compiles the collection, as pip does a package); source newer than its byte code
is compiled as before.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import sys
import traceback
import typing as t

from ansible.plugins.action import ActionBase
from ansible.vars.clean import remove_internal_keys

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import NOMAD_ENV

try:  # ansible-core 2.19+: the module's JSON arguments are encoded per serialisation profile
    from ansible.module_utils.common.json import Direction, get_module_encoder
except ImportError:  # older: every task runs the module (parsing its result differs there too)
    Direction = get_module_encoder = None  # type: ignore[assignment,misc]

MODULE = "ansible_collections.backendai.cluster.plugins.modules.session"
PROFILE = "legacy"  # the serialisation profile of a module that does not declare one (as session)
#: The packages whose modules :class:`_ByteCodeFinder` loads, and the directory they are in (this collection's
#: ``plugins``, the one Ansible loaded this plugin from).
PLUGINS_PACKAGE = "ansible_collections.backendai.cluster.plugins"
OWN_PACKAGES = tuple(PLUGINS_PACKAGE + p for p in (".modules.", ".module_utils."))
PLUGINS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _ByteCodeFinder(importlib.abc.MetaPathFinder):
    """This collection's modules and module_utils (``.py`` files; their packages stay with Ansible's loader) through
    Python's own source loader, which reads and writes their byte code (see the module's docstring)."""

    def find_spec(self, fullname: str, path: t.Any = None, target: t.Any = None) -> t.Any:
        if not fullname.startswith(OWN_PACKAGES):
            return None
        source = os.path.join(PLUGINS_DIR, *fullname[len(PLUGINS_PACKAGE) + 1:].split(".")) + ".py"
        return importlib.util.spec_from_file_location(fullname, source) if os.path.isfile(source) else None


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: t.Optional[str] = None, task_vars: t.Optional[t.Dict[str, t.Any]] = None) -> t.Dict[str, t.Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        environment: t.Dict[str, t.Any] = {}
        self._compute_environment_string(environment)  # the task's environment, as the module's process gets it
        environment = {str(k): str(v) for k, v in environment.items()}
        if self._runs_here(task_vars, environment):
            result.update(self._run_in_worker(task_vars, environment))
            return result
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result.update(self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _runs_here(self, task_vars: t.Mapping[str, t.Any], environment: t.Mapping[str, str]) -> bool:
        """Whether the module would run on this machine, under this Python, for the local backend."""
        if get_module_encoder is None or self._connection.transport != "local" or self._play_context.become \
                or self._task.async_val or self._task.delegate_to:
            return False
        interpreter = task_vars.get("ansible_python_interpreter")
        if interpreter is not None:
            interpreter = str(self._templar.template(interpreter))
            if not interpreter.startswith("auto") and interpreter != sys.executable:
                return False
        args = self._task.args
        if args.get("backend") is not None:
            return args["backend"] == "local"
        address = args.get("nomad_addr")  # else the module's fallback, NOMAD_ADDR
        if address is None:
            variable = NOMAD_ENV["nomad_addr"]
            address = environment.get(variable, os.environ.get(variable))
        return address is None or str(address) == ""

    def _run_in_worker(self, task_vars: t.Mapping[str, t.Any], environment: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
        """Run the module's ``main()`` here, as the AnsiballZ wrapper would in its own process."""
        from ansible.module_utils import basic

        module_args = dict(self._task.args)
        self._update_module_args(self._task.action, module_args, task_vars)  # check/diff mode, no_log, ... as for a module
        os.environ.update(environment)  # this worker ends with the task
        if not any(isinstance(finder, _ByteCodeFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _ByteCodeFinder())
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": module_args},
                                         cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE)).encode()
        basic._ANSIBLE_PROFILE = PROFILE
        out, err = io.StringIO(), io.StringIO()  # stderr: as of a module process, shown only when it fails
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                importlib.import_module(MODULE).main()
        except SystemExit:  # exit_json and fail_json end the module this way
            pass
        except Exception as exc:  # what the module process would have died of
            return {"failed": True, "msg": "MODULE FAILURE: %s" % exc, "exception": traceback.format_exc(),
                    "module_stderr": err.getvalue()}
        data = self._parse_returned_data({"stdout": out.getvalue(), "stderr": "", "rc": 0}, PROFILE)
        remove_internal_keys(data)
        return data
