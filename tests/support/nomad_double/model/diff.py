# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``Diff`` of a job plan (``nomad/structs/diff.go``: ``JobDiff``, ``TaskGroupDiff``, ``TaskDiff``,
``ObjectDiff``, ``FieldDiff`` with Go-formatted values; string maps shown as ``Key[sub]`` fields, scalar lists
with set semantics) and the ``Updates`` counts per group.

What it does not model: Nomad's per-struct field lists and ``contextual`` diffs (every key of the submitted
JSON is compared generically), the annotations beyond "forces create/destroy update" / "forces in-place
update", and the diff of a multiregion or periodic job.
"""

from __future__ import annotations

import itertools
import typing as t


def _go(value: t.Any) -> str:
    """A value as Nomad's diff shows it (Go formatting)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_scalar(value: t.Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _field_diff(name: str, old: t.Any, new: t.Any, old_absent: bool, new_absent: bool) -> t.Optional[t.Dict[str, t.Any]]:
    if not old_absent and not new_absent and old == new:
        return None
    if old_absent and (new is None or new == ""):
        return None
    if new_absent and (old is None or old == ""):
        return None
    kind = "Added" if old_absent else "Deleted" if new_absent else "Edited"
    return {"Type": kind, "Name": name, "Old": "" if old_absent else _go(old), "New": "" if new_absent else _go(new),
            "Annotations": None}


def _object_diff(name: str, old: t.Any, new: t.Any) -> t.Optional[t.Dict[str, t.Any]]:
    """Nomad's ObjectDiff shape for a nested struct, map or list (flattened, set semantics for scalar lists)."""
    old_absent, new_absent = old is None, new is None
    fields_: t.List[t.Dict[str, t.Any]] = []
    objects: t.List[t.Dict[str, t.Any]] = []
    if isinstance(old if not old_absent else new, list):
        olds, news = old or [], new or []
        if all(_is_scalar(v) for v in itertools.chain(olds, news)):
            old_values, new_values = {_go(v) for v in olds}, {_go(v) for v in news}
            for value in sorted(old_values | new_values):
                in_old, in_new = value in old_values, value in new_values
                if in_old != in_new:
                    fields_.append(_field_diff(name, value, value, not in_old, not in_new))  # type: ignore[arg-type]
        else:
            for i in range(max(len(olds), len(news))):
                sub = _object_diff(name, olds[i] if i < len(olds) else None, news[i] if i < len(news) else None)
                if sub:
                    objects.append(sub)
    else:
        sub_fields, sub_objects = _struct_diff(old, new)
        fields_, objects = sub_fields, sub_objects
    if not fields_ and not objects:
        return None
    kind = "Added" if old_absent else "Deleted" if new_absent else "Edited"
    return {"Type": kind, "Name": name, "Fields": fields_ or None, "Objects": objects or None}


def _struct_diff(old: t.Optional[t.Mapping[str, t.Any]], new: t.Optional[t.Mapping[str, t.Any]],
                 skip: t.Iterable[str] = ()) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.List[t.Dict[str, t.Any]]]:
    old_absent, new_absent = old is None, new is None
    old, new = old or {}, new or {}
    fields_: t.List[t.Dict[str, t.Any]] = []
    objects: t.List[t.Dict[str, t.Any]] = []
    for key in sorted(set(old) | set(new)):
        if key in skip:
            continue
        o, n = old.get(key), new.get(key)
        if _is_scalar(o) and _is_scalar(n):
            fd = _field_diff(key, o, n, old_absent or key not in old, new_absent or key not in new)
            if fd:
                fields_.append(fd)
        elif isinstance(o or n, dict) and all(_is_scalar(v) for v in itertools.chain((o or {}).values(), (n or {}).values())):
            # string maps (Meta, Env, Config scalars) are fields named "Key[sub]", as Nomad shows them
            for sub in sorted(set(o or {}) | set(n or {})):
                fd = _field_diff("%s[%s]" % (key, sub), (o or {}).get(sub), (n or {}).get(sub),
                                 sub not in (o or {}), sub not in (n or {}))
                if fd:
                    fields_.append(fd)
        else:
            od = _object_diff(key, o, n)
            if od:
                objects.append(od)
    return fields_, objects


def job_diff(old: t.Optional[t.Mapping[str, t.Any]], new: t.Mapping[str, t.Any], changes: t.Mapping[str, str],
              desired: t.Mapping[str, t.Mapping[str, int]]) -> t.Dict[str, t.Any]:
    fields_, objects = _struct_diff(old, new, skip=("TaskGroups",))
    old_groups = {g["Name"]: g for g in (old or {}).get("TaskGroups") or []}
    new_groups = {g["Name"]: g for g in new.get("TaskGroups") or []}
    tg_diffs = []
    for name in list(new_groups) + [n for n in old_groups if n not in new_groups]:
        before, after = old_groups.get(name), new_groups.get(name)
        g_fields, g_objects = _struct_diff(before, after, skip=("Tasks",))
        before_tasks = {tk["Name"]: tk for tk in (before or {}).get("Tasks") or []}
        after_tasks = {tk["Name"]: tk for tk in (after or {}).get("Tasks") or []}
        task_diffs = []
        for tname in list(after_tasks) + [n for n in before_tasks if n not in after_tasks]:
            tb, ta = before_tasks.get(tname), after_tasks.get(tname)
            t_fields, t_objects = _struct_diff(tb, ta)
            t_type = "Added" if tb is None else "Deleted" if ta is None else "Edited" if (t_fields or t_objects) else "None"
            annotations = None
            if t_type == "Edited":
                annotations = ["forces create/destroy update" if changes.get(name) == "destructive" else "forces in-place update"]
            task_diffs.append({"Type": t_type, "Name": tname, "Fields": t_fields or None, "Objects": t_objects or None,
                               "Annotations": annotations})
        g_type = "Added" if before is None else "Deleted" if after is None else \
            "Edited" if (g_fields or g_objects or any(td["Type"] != "None" for td in task_diffs)) else "None"
        d = desired.get(name, {})
        updates = {label: d.get(key, 0) for key, label in (
            ("Ignore", "ignore"), ("Place", "create"), ("Stop", "destroy"), ("InPlaceUpdate", "in-place update"),
            ("DestructiveUpdate", "create/destroy update"), ("Migrate", "migrate"), ("Canary", "canary"))
                   if d.get(key, 0)}
        tg_diffs.append({"Type": g_type, "Name": name, "Fields": g_fields or None, "Objects": g_objects or None,
                         "Tasks": task_diffs or None, "Updates": updates or None})
    if old is None:
        j_type = "Added"
    elif fields_ or objects or any(tg["Type"] != "None" for tg in tg_diffs):
        j_type = "Edited"
    else:
        j_type = "None"
    return {"Type": j_type, "ID": new["ID"], "Fields": fields_ or None, "Objects": objects or None,
            "TaskGroups": tg_diffs or None}

