# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``session_exec``'s cheap way in (``_local.runc_exec``): the process spec made from the container's own, the user
looked up in the container's account files (never outside its root filesystem), runc's own failures told from the
command's exit code, and the fall back to ``podman exec`` where runc cannot be used."""

from __future__ import annotations

import json
import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local import runc_exec

CID = "ab" * 32
PROCESS = {"terminal": True, "consoleSize": {"height": 1, "width": 1}, "user": {"uid": 0, "gid": 0, "umask": 18,
           "additionalGids": [0, 10]}, "args": ["/entrypoint"], "env": ["PATH=/bin", "HOME=/root", "RANK=3"],
           "cwd": "/", "capabilities": {"bounding": ["CAP_CHOWN", "CAP_KILL"], "effective": ["CAP_CHOWN", "CAP_KILL"],
                                        "inheritable": ["CAP_KILL"], "permitted": ["CAP_CHOWN", "CAP_KILL"]},
           "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}], "noNewPrivileges": True,
           "apparmorProfile": "containers-default-0.50.1", "oomScoreAdj": 0}


def container(tmp_path: t.Any, **changes: t.Any) -> t.Dict[str, t.Any]:
    rootfs = tmp_path / "merged"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nwork:x:1000:1000::/home/work:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nwheel:x:10:root\nwork:x:1000:\nvideo:x:44:work,other\n")
    (tmp_path / "runc" / CID).mkdir(parents=True)
    (tmp_path / "runc" / CID / "state.json").write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps({"process": PROCESS}))
    return dict({"name": "c", "id": CID, "runtime": "runc", "running": True, "config": str(tmp_path / "config.json"),
                 "rootfs": str(rootfs)}, **changes)


def test_the_session_user_gets_the_containers_process_without_root_powers(tmp_path: t.Any) -> None:
    made = runc_exec.plan(container(tmp_path), "work", ["sh", "-c", "id"], runc_root=str(tmp_path / "runc"))
    assert made is not None and made["id"] == CID
    p = made["process"]
    assert p["args"] == ["sh", "-c", "id"] and p["cwd"] == "/home/work" and p["terminal"] is False
    assert "consoleSize" not in p
    # the groups that list work (as podman exec gives them: not its primary group again), not root's
    assert p["user"] == {"uid": 1000, "gid": 1000, "umask": 18, "additionalGids": [44]}
    assert p["env"] == ["PATH=/bin", "RANK=3", "HOME=/home/work"]
    assert p["capabilities"] == {"bounding": ["CAP_CHOWN", "CAP_KILL"], "effective": [], "permitted": [],
                                 "inheritable": [], "ambient": []}
    for kept in ("rlimits", "noNewPrivileges", "apparmorProfile", "oomScoreAdj"):
        assert p[kept] == PROCESS[kept]


def test_root_keeps_the_containers_bounding_set(tmp_path: t.Any) -> None:
    made = runc_exec.plan(container(tmp_path), "root", ["hostname"], runc_root=str(tmp_path / "runc"))
    assert made is not None
    p = made["process"]
    assert p["user"]["uid"] == 0 and p["user"]["additionalGids"] == [10] and p["cwd"] == "/root"
    assert p["capabilities"]["effective"] == p["capabilities"]["permitted"] == ["CAP_CHOWN", "CAP_KILL"]
    assert p["capabilities"]["inheritable"] == []


def test_podman_exec_is_used_where_runc_cannot_be(tmp_path: t.Any) -> None:
    runc_root = str(tmp_path / "runc")
    base = container(tmp_path)
    assert runc_exec.plan(dict(base, runtime="crun"), "work", ["id"], runc_root=runc_root) is None
    assert runc_exec.plan(dict(base, running=False), "work", ["id"], runc_root=runc_root) is None
    assert runc_exec.plan(dict(base, id="cd" * 32), "work", ["id"], runc_root=runc_root) is None  # no runc state
    assert runc_exec.plan(dict(base, id="../" + CID), "work", ["id"], runc_root=runc_root) is None
    assert runc_exec.plan(base, "nobody-here", ["id"], runc_root=runc_root) is None
    assert runc_exec.plan(dict(base, config=str(tmp_path / "missing.json")), "work", ["id"], runc_root=runc_root) is None


def test_account_files_are_not_read_through_a_link_out_of_the_container(tmp_path: t.Any) -> None:
    outside = tmp_path / "host-passwd"
    outside.write_text("work:x:0:0::/:/bin/sh\n")
    base = container(tmp_path)
    passwd = os.path.join(base["rootfs"], "etc", "passwd")
    os.remove(passwd)
    os.symlink(str(outside), passwd)
    assert runc_exec.lookup_user(base["rootfs"], "work") is None
    os.remove(passwd)
    os.symlink("../etc/../../host-passwd", passwd)
    assert runc_exec.lookup_user(base["rootfs"], "work") is None


def test_runcs_own_failure_is_told_from_the_commands_exit_code() -> None:
    def log(message: str) -> str:
        return json.dumps({"level": "error", "msg": message}) + "\n"

    assert runc_exec.runc_failure(0, "") is None
    assert runc_exec.runc_failure(3, log("anything")) is None
    assert runc_exec.runc_failure(255, "") is None  # the command's own 255 (ssh's, say)
    assert runc_exec.runc_failure(255, json.dumps({"level": "warning", "msg": "x"})) is None
    missing = 'exec failed: unable to start container process: exec: "nope": executable file not found in $PATH'
    assert runc_exec.runc_failure(255, log(missing)) == (127, missing)
    assert runc_exec.runc_failure(255, log("exec failed: permission denied")) == (126, "exec failed: permission denied")
    assert runc_exec.runc_failure(255, "not json\n" + log("cannot exec in a stopped container")) == (
        None, "cannot exec in a stopped container")


def test_what_is_read_of_podmans_inspect() -> None:
    entry = {"Name": "bai-x-main1", "Id": CID, "OCIRuntime": "runc", "OCIConfigPath": "/c/config.json",
             "State": {"Running": True, "Pid": 7}, "GraphDriver": {"Data": {"MergedDir": "/m"}}}
    assert runc_exec.from_inspect(entry) == {"name": "bai-x-main1", "id": CID, "runtime": "runc",
                                             "config": "/c/config.json", "running": True, "rootfs": "/m", "pid": 7}
    assert runc_exec.from_inspect({"Name": "n", "State": None})["running"] is False


def test_a_spec_without_rlimits_gets_the_containers_own(tmp_path: t.Any) -> None:
    limits = tmp_path / "limits"
    limits.write_text("Limit                     Soft Limit           Hard Limit           Units     \n"
                      "Max processes             32768                32768                processes \n"
                      "Max core file size        0                    unlimited            bytes     \n")
    assert runc_exec.init_rlimits(1, str(limits)) == [{"type": "RLIMIT_NPROC", "soft": 32768, "hard": 32768},
                                                      {"type": "RLIMIT_CORE", "soft": 0, "hard": 2 ** 64 - 1}]
    assert runc_exec.init_rlimits(1, str(tmp_path / "gone")) == []
