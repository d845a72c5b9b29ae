# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of ``backendai.cluster.session``: a local session is made in the worker process.

For a session on the controller itself (the local backend, which is the default without a Nomad
address) the module would be packed into an AnsiballZ payload and started as a second Python
process on the very same machine, which then imports Ansible's module code and this collection
again: about 2 s of the 2.4 s that ``playbooks/create_session.yml`` took over an empty playbook
(``benchmarks/playbook_overhead.py --breakdown``). This plugin runs the module's local step
(``_session_options.run_local``) right here in Ansible's worker process instead, when all of these hold:

* the connection is ``local`` (the target is the controller), with no ``become``, no ``async`` and
  no ``delegate_to``;
* the target's ``ansible_python_interpreter`` is unset, discovered, or the Python that runs
  ansible-playbook (another interpreter was asked for: the module runs under it);
* the arguments validate against the module's own argument spec and resolve to the local backend.

Everything else - the Nomad backend, a remote host, invalid arguments (so the error is the module's
own) - runs the module as usual. What the module does is kept: the same argument spec (defaults,
aliases, environment fallbacks, the task's ``environment``), the same state-directory check, check
and diff mode, the same expected errors (message and extra keys, no traceback), values of ``no_log``
options masked in the result, ``invocation`` in the result, and the
``module_defaults`` of ``group/backendai.cluster.nomad`` (applied by Ansible to the task's
arguments before any action runs). The worker is a throw-away fork per task, so the environment it
sets for the run does not outlive the task.
"""

from __future__ import annotations

import json
import os
import sys
import typing as t

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: t.Optional[str] = None, task_vars: t.Optional[t.Dict[str, t.Any]] = None) -> t.Dict[str, t.Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        local = self._in_process(task_vars)
        if local is None:
            wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
            result.update(self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        result.update(local)
        return result

    # -----------------------------------------------------------------------------------------
    def _controller_is_target(self, task_vars: t.Mapping[str, t.Any]) -> bool:
        if self._connection.transport != "local" or self._play_context.become or self._task.async_val \
                or self._task.delegate_to:
            return False
        interpreter = task_vars.get("ansible_python_interpreter")
        if interpreter is None:
            return True
        interpreter = str(self._templar.template(interpreter))
        return interpreter.startswith("auto") or interpreter == sys.executable

    def _in_process(self, task_vars: t.Mapping[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
        """The task's result when it ran here; None when the module has to run it."""
        if not self._controller_is_target(task_vars):
            return None
        try:  # the arguments as the module would receive them (plain JSON types, no templating tags)
            args = json.loads(json.dumps(dict(self._task.args)))
        except (TypeError, ValueError):
            return None
        environment: t.Dict[str, t.Any] = {}
        self._compute_environment_string(environment)
        os.environ.update({str(k): str(v) for k, v in environment.items()})  # as the module's process would see it

        from ansible_collections.backendai.cluster.plugins.module_utils import _module_base, _session_options

        validated = ArgumentSpecValidator(_module_base.merged_argument_spec(_session_options.OPTIONS, _session_options.SHARED),
                                          required_if=_session_options.REQUIRED_IF).validate(args)
        if validated.error_messages or validated._warnings or validated._deprecations \
                or not _session_options.uses_local_backend(validated.validated_parameters):
            return None  # a Nomad session, or arguments the module rejects or warns about (in its own words)
        params = validated.validated_parameters
        hidden = validated._no_log_values  # what AnsibleModule masks too
        try:
            _module_base.check_directory_options(params)
            out = _session_options.run_local(params, check_mode=bool(self._task.check_mode))
        except Exception as exc:  # re-raised below unless it is an expected error
            failure = _module_base.expected_failure(exc)
            if failure is None:
                raise
            out = dict(failure[1], failed=True, msg=failure[0])
        out["invocation"] = {"module_args": params}
        # as AnsibleModule: mask no_log values everywhere, but keep booleans and None as they are
        kept = {k: v for k, v in out.items() if v is None or isinstance(v, bool)}
        out = remove_values(out, hidden)
        out.update(kept)
        return out
