# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Request bodies (jobs, register and plan requests, variables) checked against the Nomad job API schema,
``tests/support/nomad_api_schema/nomad/job-api.schema.json`` (the repository's copy of ``../shared``'s: see its README). This is where the double is stricter than Nomad on purpose: Nomad decodes JSON into its
``api`` structs and silently drops an unknown or mis-cased key; the double answers ``400`` naming the key and
Nomad's spelling. It checks types and shapes only, not Nomad's ``Job.Validate`` (see ``model/jobs.py``).
"""

from __future__ import annotations

import json
import os
import re
import typing as t

from .http_shell import BadRequest

SUPPORT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_PATH = os.path.join(SUPPORT, "nomad_api_schema", "nomad", "job-api.schema.json")
SCHEMA_KINDS = {"job": "Job", "register": "JobRegisterRequest", "plan": "JobPlanRequest", "variable": "Variable"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _json_path(parts: t.Sequence[t.Any]) -> str:
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += "[%d]" % p
        elif _IDENT.match(str(p)):
            out += "." + str(p)
        else:
            out += "[%s]" % json.dumps(p)
    return out



class SchemaChecker:
    """The shared JSON schema (``job-api.schema.json``) for one kind of request body."""

    _cache: t.Dict[str, "SchemaChecker"] = {}

    def __init__(self, path: str = SCHEMA_PATH) -> None:
        import jsonschema  # test dependency

        if not os.path.isfile(path):
            raise FileNotFoundError("%s is missing (tests/support/nomad_api_schema/README.md says how to refresh it)" % path)
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
        self._validators = {}
        for kind, ref in SCHEMA_KINDS.items():
            root = dict(schema)
            root["$ref"] = "#/$defs/" + ref
            self._validators[kind] = jsonschema.Draft202012Validator(root)

    @classmethod
    def load(cls, path: str = SCHEMA_PATH) -> "SchemaChecker":
        if path not in cls._cache:
            cls._cache[path] = cls(path)
        return cls._cache[path]

    def problems(self, kind: str, doc: t.Any) -> t.List[str]:
        out = []
        for err in sorted(self._validators[kind].iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
            path = list(err.absolute_path)
            if err.validator == "additionalProperties" and err.validator_value is False:
                known = list(err.schema.get("properties", {}))
                for key in err.instance:
                    if key in known:
                        continue
                    same = [k for k in known if k.lower() == str(key).lower()]
                    hint = ("non-canonical key (Nomad's spelling is %r)" % same[0]) if same else \
                        "unknown key (Nomad would silently ignore it)"
                    out.append("%s: %s" % (_json_path(path + [key]), hint))
            else:
                out.append("%s: %s" % (_json_path(path), err.message))
        return out

    def check(self, kind: str, doc: t.Any) -> None:
        problems = self.problems(kind, doc)
        if problems:
            raise BadRequest(400, "Request body is not a valid %s (checked by the Nomad API double against "
                                  "job-api.schema.json):\n%s" % (SCHEMA_KINDS[kind], "\n".join(problems)))


