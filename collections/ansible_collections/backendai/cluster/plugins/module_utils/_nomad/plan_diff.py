# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Nomad's job plan ``Diff`` as readable changes and as Ansible ``diff`` before/after text. Pure.

The job holds no secret (the keypair is read by the tasks at runtime), so neither does its diff.
"""

from __future__ import annotations

import typing as t

UNSET = "<unset>"


class Change(t.NamedTuple):
    path: str  # TaskGroups[main1].Tasks[kernel].Env[FOO]
    kind: str  # Added, Deleted, Edited
    old: str
    new: str

    def __str__(self) -> str:
        if self.kind == "Added" and self.new == "":
            return "%s: added" % self.path
        if self.kind == "Deleted" and self.old == "":
            return "%s: deleted" % self.path
        return "%s: %s -> %s" % (self.path, _short(self.old if self.kind != "Added" else UNSET),
                                 _short(self.new if self.kind != "Deleted" else UNSET))


def _short(text: str, limit: int = 120) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _fields(prefix: str, fields: t.Optional[t.Iterable[t.Mapping[str, t.Any]]]) -> t.Iterator[Change]:
    for f in fields or []:
        if f.get("Type") in (None, "", "None"):
            continue
        yield Change("%s%s" % (prefix, f.get("Name")), str(f.get("Type")), str(f.get("Old") or ""), str(f.get("New") or ""))


def _objects(prefix: str, objects: t.Optional[t.Iterable[t.Mapping[str, t.Any]]]) -> t.Iterator[Change]:
    for o in objects or []:
        if o.get("Type") in (None, "", "None"):
            continue
        path = "%s%s" % (prefix, o.get("Name"))
        inner = list(_fields(path + ".", o.get("Fields"))) + list(_objects(path + ".", o.get("Objects")))
        if inner:
            yield from inner
        else:
            yield Change(path, str(o.get("Type")), "", "")


def changes(diff: t.Optional[t.Mapping[str, t.Any]]) -> t.List[Change]:
    """Every changed field of a job plan ``Diff`` (``Type`` None gives no change)."""
    if not diff or diff.get("Type") in (None, "", "None"):
        return []
    out = list(_fields("", diff.get("Fields"))) + list(_objects("", diff.get("Objects")))
    for group in diff.get("TaskGroups") or []:
        if group.get("Type") in (None, "", "None"):
            continue
        gpath = "TaskGroups[%s]" % group.get("Name")
        inner = list(_fields(gpath + ".", group.get("Fields"))) + list(_objects(gpath + ".", group.get("Objects")))
        for task in group.get("Tasks") or []:
            if task.get("Type") in (None, "", "None"):
                continue
            tpath = "%s.Tasks[%s]" % (gpath, task.get("Name"))
            task_inner = list(_fields(tpath + ".", task.get("Fields"))) + list(_objects(tpath + ".", task.get("Objects")))
            inner.extend(task_inner or [Change(tpath, str(task.get("Type")), "", "")])
        if group.get("Type") in ("Added", "Deleted"):
            inner = [Change(gpath, str(group.get("Type")), "", "")]
        out.extend(inner or [Change(gpath, str(group.get("Type")), "", "")])
    return out


def diff_texts(found: t.Sequence[Change]) -> t.Tuple[str, str]:
    """Ansible ``diff`` before/after texts: one ``path: value`` line per change (multi-line values indented)."""
    before, after = [], []
    for change in found:
        old = UNSET if change.kind == "Added" else change.old
        new = UNSET if change.kind == "Deleted" else change.new
        if change.kind == "Added" and change.new == "":
            new = "<added>"
        if change.kind == "Deleted" and change.old == "":
            old = "<present>"
        before.append(_line(change.path, old))
        after.append(_line(change.path, new))
    return "".join(before), "".join(after)


def _line(path: str, value: str) -> str:
    if "\n" in value:
        return "%s: |\n%s\n" % (path, "\n".join("  " + v for v in value.rstrip("\n").split("\n")))
    return "%s: %s\n" % (path, value)
