# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import graph of module_utils, read with ``ast``: one-way layers, no cycle, and what each plugin loads.

Layers, lowest first (a module may import its own package and anything in a lower layer, nothing
else; the two backends are siblings and never import each other):

0. ``_errors``, ``_defaults``, ``_files``: leaves, import nothing of the collection
1. ``_network``: the session network plugin, stdlib only (it runs on agents without this package)
2. ``_session``: pure planning (spec, placement, plan, env, keys, state, view, the backend interface)
3. ``_vault``: the Vault client
4. ``_nomad`` and ``_local``: the two backends
5. ``_ansible``: the module base, the argument specs, the choice of backend

"Loads" has two meanings here: the *payload* is every module_utils file a plugin can import (what
Ansible ships with a module: it follows imports inside functions too), *eager* is what importing
the plugin imports at once (module-level statements, not function bodies nor ``TYPE_CHECKING``).

Shipped code serves the collection, not its tests: every name a module_utils file defines is used by the
plugins, and what once shipped for the tests alone (a fault hook, helpers only tests called) stays out.
"""

from __future__ import annotations

import ast
import os
import sys
import typing as t

import pytest

PLUGINS = os.path.normpath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4, "plugins"))
MODULE_UTILS = os.path.join(PLUGINS, "module_utils")
PREFIX = "ansible_collections.backendai.cluster.plugins.module_utils"

LAYERS: t.List[t.Set[str]] = [
    {"_errors", "_defaults", "_files"},
    {"_network"},
    {"_session"},
    {"_vault"},
    {"_nomad", "_local"},
    {"_ansible"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

#: plugin -> (every subpackage its payload holds, the subpackages importing it loads at once)
LOADS = {
    "modules/session.py": ({"_ansible", "_errors", "_defaults", "_files", "_session", "_network", "_vault", "_nomad",
                            "_local"}, {"_ansible", "_errors", "_defaults", "_session"}),
    "modules/session_info.py": ({"_ansible", "_errors", "_defaults", "_files", "_session", "_network", "_vault",
                                 "_nomad", "_local"}, {"_ansible", "_errors", "_defaults", "_session"}),
    "modules/session_render.py": ({"_ansible", "_errors", "_defaults", "_files", "_session", "_network", "_vault",
                                   "_nomad"}, None),
    # the clients come with the module base (ClusterModule.nomad(), .vault()), imported only when called
    "modules/local_agents.py": ({"_ansible", "_errors", "_defaults", "_files", "_session", "_network", "_vault",
                                 "_nomad", "_local"}, {"_ansible", "_errors", "_defaults", "_files", "_network", "_local"}),
    # _network: the underlay MTU default, one source (_nomad.nodes imports it from _session_network, stdlib only)
    "inventory/nomad_nodes.py": ({"_errors", "_defaults", "_nomad", "_network"}, {"_errors", "_defaults", "_nomad", "_network"}),
}


def _python_files(root: str) -> t.Dict[str, str]:
    """Dotted name below module_utils (``_nomad.api``) -> path."""
    out = {}
    for directory, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                rel = os.path.relpath(os.path.join(directory, name), root)[:-3]
                out[rel.replace(os.sep, ".")] = os.path.join(directory, name)
    return out


MODULES = _python_files(MODULE_UTILS)


class _Imports(ast.NodeVisitor):
    """The collection's module_utils a file imports: ``all`` (payload) and ``eager`` (module level)."""

    def __init__(self) -> None:
        self.all: t.Set[str] = set()
        self.eager: t.Set[str] = set()
        self.foreign: t.Set[str] = set()  # top-level names of everything else it imports
        self._lazy = 0

    def _add(self, name: str) -> None:
        self.all.add(name)
        if not self._lazy:
            self.eager.add(name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == PREFIX or module.startswith(PREFIX + "."):
            base = module[len(PREFIX):].lstrip(".")
            for alias in node.names:
                candidate = ("%s.%s" % (base, alias.name)).lstrip(".")
                self._add(candidate if candidate in MODULES else base)
        else:
            self.foreign.add(module.split(".")[0])

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.foreign.add(alias.name.split(".")[0])

    def _nested(self, node: ast.AST) -> None:
        self._lazy += 1
        self.generic_visit(node)
        self._lazy -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _nested

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test) if hasattr(ast, "unparse") else ""
        if test.endswith("TYPE_CHECKING"):
            self._nested(node)
        else:
            self.generic_visit(node)


def _imports(path: str) -> _Imports:
    with open(path, encoding="utf-8") as f:
        visitor = _Imports()
        visitor.visit(ast.parse(f.read(), path))
    return visitor


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _unit(name: str) -> str:
    return name.split(".")[0]


def test_every_module_utils_file_is_in_a_layer() -> None:
    assert {_unit(n) for n in MODULES} == set(RANK)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_upward_or_sideways_import(name: str) -> None:
    for target in GRAPH[name].all:
        assert target in MODULES, "%s imports %s, which is not a module_utils file" % (name, target)
        if _unit(target) != _unit(name):
            assert RANK[_unit(target)] < RANK[_unit(name)], "%s (layer %d) imports %s (layer %d)" % (
                name, RANK[_unit(name)], target, RANK[_unit(target)])


def test_no_cycle() -> None:
    state: t.Dict[str, int] = {}
    path: t.List[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(GRAPH[name].all):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target)
        path.pop()
        state[name] = 2

    for name in sorted(MODULES):
        if name not in state:
            visit(name)


def test_the_session_network_plugin_is_stdlib_only() -> None:
    """``_network`` runs on agents as top-level modules with no Ansible and no collection around it."""
    allowed = set(sys.stdlib_module_names) | {"_cni_plugin", "_cni_system", "_cni_nomad", "_session_network", "ansible_collections"}
    for name in MODULES:
        if _unit(name) == "_network":
            assert GRAPH[name].foreign <= allowed, (name, GRAPH[name].foreign - allowed)
            assert {_unit(n) for n in GRAPH[name].all} <= {"_network"}, name


def _closure(roots: t.Iterable[str], eager: bool) -> t.Set[str]:
    seen: t.Set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(GRAPH[name].eager if eager else GRAPH[name].all)
    return seen


@pytest.mark.parametrize("plugin", sorted(LOADS))
def test_what_each_plugin_loads(plugin: str) -> None:
    imports = _imports(os.path.join(PLUGINS, plugin))
    payload, eager = LOADS[plugin]
    assert {_unit(n) for n in _closure(imports.all, eager=False)} == payload
    if eager is not None:
        assert {_unit(n) for n in _closure(imports.eager, eager=True)} == eager


def test_a_local_run_does_not_load_the_nomad_or_vault_clients() -> None:
    """What part of the payload importing ``session`` runs at once (the backend is imported when chosen)."""
    imports = _imports(os.path.join(PLUGINS, "modules", "session.py"))
    loaded = _closure(imports.eager, eager=True) | _closure(["_local.local_backend"], eager=True)
    assert not [n for n in loaded if _unit(n) in ("_nomad", "_vault")]
    assert not {"requests", "nomad", "hvac"} & {f for n in loaded for f in GRAPH[n].foreign}


def test_local_agents_load_no_planning_code_at_once() -> None:
    """``local_agents`` installs agents through ``_local.agent_network``, which names the local session's type only for
    type checking: importing it loads none of the planning code (nor the key generation's cryptography)."""
    loaded = _closure(["_local.agents"], eager=True)
    assert sorted(n for n in loaded if n.startswith("_session.") or n == "_local.session") == []


#: Helpers that live in tests/ and once shipped for the tests' sake alone: a local session given as a dict
#: (tests/support/local_session_dict.py) and a job's CNI args as Nomad's client builds them (cluster_cases.py); defining
#: one in plugins/ again fails here (the test above would miss it while a test uses the name).
TEST_ONLY = {"create_session", "client_args"}


def _plugin_trees() -> t.Dict[str, ast.Module]:
    out = {}
    for directory, _dirs, files in os.walk(PLUGINS):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, PLUGINS)] = ast.parse(f.read(), path)
    return out


def _defined(tree: ast.Module, members: bool = False) -> t.Set[str]:
    """The names ``tree`` defines at its top (functions, classes, assignments); with ``members``, in its classes too."""
    out: t.Set[str] = set()
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            if members and isinstance(node, ast.ClassDef):
                nodes.extend(node.body)
        elif isinstance(node, ast.Assign):
            out.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _used(tree: ast.Module) -> t.Set[str]:
    """Every name ``tree`` reads, as a name, an attribute or an import (a definition alone is no use)."""
    out: t.Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out.update(alias.name for alias in node.names)
    return out


def test_every_module_utils_name_is_used_by_the_plugins() -> None:
    """A name defined at the top of a module_utils file that no file of plugins/ uses (its own file included, its
    definition not) is dead, or kept for tests and benchmarks alone: either way it does not ship; a test's helper
    belongs in tests/. Names are matched by name, not by module: a use of the same name anywhere counts, so this
    misses a test-only name that shares its name with one in use, never reports a used one."""
    trees = _plugin_trees()
    used = set().union(*(_used(tree) for tree in trees.values()))
    unused = sorted("%s: %s" % (path, name) for path, tree in trees.items() if path.startswith("module_utils" + os.sep)
                    for name in _defined(tree) - used if not name.startswith("__"))
    assert not unused, "defined in module_utils, used by no plugin (dead, or for tests: move it to tests/): %s" % unused


def test_no_test_only_name_is_shipped() -> None:
    found = sorted("%s: %s" % (path, name) for path, tree in _plugin_trees().items()
                   for name in _defined(tree, members=True) & TEST_ONLY)
    assert not found, "a name that serves tests alone is back in plugins/ (keep it in tests/): %s" % found
