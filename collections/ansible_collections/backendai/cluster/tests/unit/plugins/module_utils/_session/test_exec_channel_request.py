# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exec channel's request (``_session.exec_channel.request_text``): every word of the spec quoted for sh, the
user switch after the environment, and the entrypoint's line that starts the agent only where the directory is."""

from __future__ import annotations

import subprocess

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import ENTRYPOINT
from ansible_collections.backendai.cluster.plugins.module_utils._session import exec_channel

PROCESS = {"args": ["printf", "%s|", "a b", "$HOME", "it's", "x\ny"], "cwd": "/home/work dir",
           "env": ["PATH=/bin:/usr/bin", "A=1 2", "B=$(id)", "NOVALUE"],
           "user": {"uid": 1000, "gid": 1000, "umask": 18, "additionalGids": [44, 27]}}


def run_go(process: dict) -> list:
    """C, M and the argv ``go`` would exec (a stand-in for exec prints it), each word whole."""
    text = exec_channel.request_text(process)
    assert text.count("go() { exec ") == 1
    script = "E=/env SP=/setpriv\nshow() { for a in \"$@\"; do printf '%s\\0' \"$a\"; done; }\n"
    script += text.replace("go() { exec ", "go() { show ") + 'printf "%s\\0%s\\0" "$C" "$M"; go\n'
    out = subprocess.run(["sh", "-c", script], check=True, stdout=subprocess.PIPE).stdout.decode()
    return out.split("\0")[:-1]


def test_the_request_runs_setpriv_then_the_argv_in_the_specs_environment() -> None:
    assert run_go(PROCESS) == [
        "/home/work dir", "0022", "/env", "-i", "--", "PATH=/bin:/usr/bin", "A=1 2", "B=$(id)", "/setpriv",
        "--reuid=1000", "--regid=1000", "--groups=44,27", "--inh-caps=-all", "--", "printf", "%s|", "a b", "$HOME",
        "it's", "x\ny"]


def test_no_supplementary_groups_clears_them() -> None:
    words = run_go(dict(PROCESS, user={"uid": 0, "gid": 0}))
    assert words[:2] == ["/home/work dir", "0022"] and "--clear-groups" in words and "--reuid=0" in words


def test_the_entrypoint_starts_the_agent_only_where_the_local_backend_bound_it() -> None:
    assert exec_channel.ENTRYPOINT_LINE in ENTRYPOINT.splitlines()
    assert exec_channel.ENTRYPOINT_LINE.startswith("[ ! -f %s/%s ] ||" % (exec_channel.MOUNT, exec_channel.AGENT_FILE))
