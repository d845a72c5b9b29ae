# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's error base class and the errors of its input. A leaf: imports nothing.

Every error a module can show derives from :class:`BackendAIClusterError`; the module base turns
it into ``fail_json`` with :meth:`BackendAIClusterError.details` as extra result keys, never a
traceback. The clients' errors (``NomadError``, ``VaultError``), the local runtime's, the
admission's and the claims' all derive from it. The only exceptions: ``_network`` (stdlib only,
run on agents without this package) raises its own ``NetworkError``, which the collection wraps
where it calls it; and control flow that never leaves its module.

Every user-facing problem is a :class:`Problem` that names the field path, the value given and
what is allowed, so that a caller can report all of them at once instead of a traceback.
"""

from __future__ import annotations

import json
import typing as t


class Problem(t.NamedTuple):
    """One thing wrong with the input: ``path`` (``session.resources.cpu``), what was given, what is allowed."""

    path: str
    message: str
    value: t.Any = None
    has_value: bool = False

    def __str__(self) -> str:
        if self.has_value:
            return "%s: %s (got %s)" % (self.path, self.message, _short_repr(self.value))
        return "%s: %s" % (self.path, self.message)


def _short_repr(value: t.Any) -> str:
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class BackendAIClusterError(Exception):
    """Base class of this collection's expected errors (never shown as a traceback)."""

    def details(self) -> t.Dict[str, t.Any]:
        """Extra keys of the failed task's result (none by default)."""
        return {}


class InputError(BackendAIClusterError):
    """The input (spec or agent list) is invalid; carries every problem found."""

    def __init__(self, what: str, problems: t.Sequence[Problem]) -> None:
        self.what = what
        self.problems = list(problems)
        lines = ["%s is invalid (%d problem%s):" % (what, len(self.problems), "" if len(self.problems) == 1 else "s")]
        lines.extend("  - " + str(p) for p in self.problems)
        super().__init__("\n".join(lines))

    def details(self) -> t.Dict[str, t.Any]:
        return {"problems": [str(p) for p in self.problems]}


class SpecError(InputError):
    """The session spec is invalid."""

    def __init__(self, problems: t.Sequence[Problem]) -> None:
        super().__init__("session spec", problems)


class AgentsError(InputError):
    """The agent list is invalid."""

    def __init__(self, problems: t.Sequence[Problem]) -> None:
        super().__init__("agent list", problems)


class PlanError(BackendAIClusterError):
    """The spec is valid but cannot be planned as asked (for example a bridge network across agents)."""


class ModuleFailure(BackendAIClusterError):
    """An expected failure that carries extra result keys (``result``) for ``fail_json``."""

    def __init__(self, message: str, result: t.Optional[t.Mapping[str, t.Any]] = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})

    def details(self) -> t.Dict[str, t.Any]:
        return dict(self.result)
