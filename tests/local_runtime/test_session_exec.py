# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""backendai.cluster.session_exec on real containers: an 8-container session across 3 local agents.

The local backend (``podman exec``): every container's output, exit code and time; one container failing its command
reported as such (and the task's failure by ``fail_on``); selection by role and hostname; the session user against
root (``id -u``); a timeout; check mode runs nothing; bad input named by field.

The Nomad path (one ssh to main1, then ``ssh <hostname>`` over the session network), run here against the in-test
Nomad API double (not Nomad) for the look-ups (job, allocations, the keypair's variable), with the same local session
standing in for the allocations: the double's main1 allocation is given the address and port the local backend
published main1's sshd on, and the keypair variable the local session's keypair, so the ssh part runs against the
containers' real sshd (the entrypoint is the Nomad job's). Checked: every container answers through main1, the
private key never shows, ``user: root`` is refused (the containers' sshd admit only the session user), a container
Nomad reports not running is not run in, and a main1 whose host key is not the session's is refused.
"""
from __future__ import annotations

import os
import sys
import typing as t
import uuid

import pytest
import requests

import local_session_dict
from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local import local_backend
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import PRIVATE_KEY_ITEM, PUBLIC_KEY_ITEM
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from ansible_collections.backendai.cluster.plugins.modules import session_exec
from module_helpers import NOMAD_TOKEN, VAULT_TOKEN, ModuleRun, private_key_lines
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki, vault_double, vault_double_factory  # noqa: F401
from nomad_double.server import NomadAPIDouble

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit", "plugins", "modules"))
from test_return_docs import Results  # noqa: E402 - RETURN checked against real results, as for the other modules

HOSTS = ["main1"] + ["sub%d" % i for i in range(1, 8)]
NAME = "ex"


@pytest.fixture(scope="module")
def agents(run_dir: str) -> t.Iterator[t.List[t.Dict[str, t.Any]]]:
    """Three local agents, each with room for 3 of the session's containers (so it needs all three)."""
    root = os.path.join(run_dir, "exec-agents-" + uuid.uuid4().hex[:8])
    made = local_agents.create_agents([{"name": "agent%d" % i, "cpu": 3000, "memory": 2048} for i in (1, 2, 3)], root)
    try:
        yield made["agents"]
    finally:
        local_agents.destroy_agents(root)


@pytest.fixture(scope="module")
def live(agents: t.List[t.Dict[str, t.Any]], run_dir: str) -> t.Iterator[t.Dict[str, t.Any]]:
    """The session (through the local backend, as the session module makes it): its view and state root. 1000 MHz a
    container: the Nomad path's main1 runs 7 ssh clients at once, which at 500 MHz (a CPU quota of 0.2 s in each 1 s
    period) waited for the next periods."""
    root = os.path.join(run_dir, uuid.uuid4().hex[:8])
    backend = local_backend.LocalBackend(root, task=local_session_dict.TASK)
    spec = {"name": NAME, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": len(HOSTS),
            "cluster_mode": "multi-node", "resources": {"cpu": 1000, "memory": 256}}
    result = backend.present(spec, agents=agents)
    try:
        yield {"view": result["session"], "root": root}
    finally:
        backend.absent(NAME)


def exec_local(run: ModuleRun, live: t.Dict[str, t.Any], **args: t.Any) -> t.Dict[str, t.Any]:
    return run(session_exec, dict({"name": NAME, "backend": "local", "state_dir": live["root"]}, **args))


def by_host(result: t.Dict[str, t.Any]) -> t.Dict[str, t.Dict[str, t.Any]]:
    return {c["hostname"]: c for c in result["containers"]}


def test_every_container_across_three_agents_answers(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    assert len({c["agent"] for c in live["view"]["containers"]}) == 3
    result = exec_local(run, live, command="hostname; echo to-stderr >&2")
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True and result["backend"] == "local" and result["failed_hostnames"] == []
    assert [c["hostname"] for c in result["containers"]] == HOSTS
    for c in result["containers"]:
        assert (c["result"], c["exit_code"], c["stdout"], c["stderr"]) == ("ok", 0, c["hostname"] + "\n", "to-stderr\n")
        assert c["role"] == ("main" if c["hostname"] == "main1" else "sub") and 0 < c["time"] < 60


def test_one_container_failing_its_command_is_reported(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    command = "h=$(hostname); echo out-$h; echo err-$h >&2; [ $h != sub5 ] || exit 3"
    failed = exec_local(run, live, command=command)
    assert failed["failed"] is True and "sub5 (the command exited 3)" in failed["msg"] and "1 of 8" in failed["msg"]
    assert failed["failed_hostnames"] == ["sub5"] and "exception" not in failed
    sub5 = by_host(failed)["sub5"]
    assert (sub5["result"], sub5["exit_code"], sub5["stdout"], sub5["stderr"]) == ("failed", 3, "out-sub5\n", "err-sub5\n")
    assert {h: c["result"] for h, c in by_host(failed).items() if h != "sub5"} == {h: "ok" for h in HOSTS if h != "sub5"}
    for fail_on in ("none", "all"):  # reported, and the task does not fail
        kept = exec_local(run, live, command=command, fail_on=fail_on)
        assert not kept.get("failed") and kept["failed_hostnames"] == ["sub5"] and by_host(kept)["sub5"]["exit_code"] == 3
    everywhere = exec_local(run, live, command="exit 4", fail_on="all")
    assert everywhere["failed"] is True and everywhere["failed_hostnames"] == HOSTS


def test_selection_by_role_and_hostname(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    def hosts(**args: t.Any) -> t.List[str]:
        result = exec_local(run, live, command="hostname", **args)
        assert not result.get("failed"), result.get("msg")
        assert all(c["stdout"] == c["hostname"] + "\n" for c in result["containers"])
        return [c["hostname"] for c in result["containers"]]

    assert hosts(roles=["main"]) == ["main1"]
    assert hosts(roles=["sub"]) == HOSTS[1:]
    assert hosts(hostnames=["sub6", "sub2"]) == ["sub2", "sub6"]  # in the session's order
    assert hosts(hostnames=["sub3"], roles=["main"]) == ["main1", "sub3"]  # either selects


def test_session_user_or_root(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    work = exec_local(run, live, command='echo "$(id -u) $(id -un) $HOME $(pwd)"')
    assert {c["stdout"] for c in work["containers"]} == {"1000 work /home/work /home/work\n"}
    assert {c["user"] for c in work["containers"]} == {"session"}
    root = exec_local(run, live, command='echo "$(id -u) $HOME"', user="root", roles=["sub"])
    assert [c["stdout"] for c in root["containers"]] == ["0 /root\n"] * 7 and {c["user"] for c in root["containers"]} == {"root"}
    denied = exec_local(run, live, command="touch /etc/exec-probe", hostnames=["sub1"])
    assert denied["failed"] is True and by_host(denied)["sub1"]["exit_code"] != 0  # the session user is not root


def test_argv_runs_without_a_shell(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    result = exec_local(run, live, argv=["printf", "%s|", "a b", "$HOME"], hostnames=["sub4"])
    assert by_host(result)["sub4"]["stdout"] == "a b|$HOME|"


def test_timeout_reports_the_container_that_still_runs(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    result = exec_local(run, live, command='[ "$(hostname)" != sub7 ] || sleep 60', command_timeout=2,
                        hostnames=["main1", "sub7"])
    assert result["failed"] is True and result["failed_hostnames"] == ["sub7"]
    sub7 = by_host(result)["sub7"]
    assert (sub7["result"], sub7["exit_code"]) == ("timed_out", None) and 2 <= sub7["time"] < 30
    assert by_host(result)["main1"]["result"] == "ok"


def test_check_mode_runs_nothing(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    probe = "/tmp/exec-check-%s" % uuid.uuid4().hex[:8]
    checked = run(session_exec, {"name": NAME, "backend": "local", "state_dir": live["root"], "command": "touch " + probe},
                  check=True)
    assert not checked.get("failed") and {c["result"] for c in checked["containers"]} == {"skipped"}
    assert len(checked["containers"]) == 8
    after = exec_local(run, live, command="test ! -e " + probe)
    assert not after.get("failed"), after["msg"]


def test_bad_input_names_the_field(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    def failure(**args: t.Any) -> str:
        result = exec_local(run, live, **args)
        assert result["failed"] is True and "Traceback" not in result["msg"] and not result.get("exception")
        return result["msg"]

    msg = failure(command="true", hostnames=["sub1", "sub9"])
    assert "hostnames[1]" in msg and "sub9" in msg and "main1, sub1, sub2" in msg
    assert "roles" in failure(command="true", roles=["worker"]) and "main, sub" in failure(command="true", roles=["worker"])
    assert "mutually exclusive" in failure(command="true", argv=["true"])
    assert "command" in failure() and "argv" in failure()
    assert "command_timeout" in failure(command="true", command_timeout=-1)
    assert "user" in failure(command="true", user="admin")
    assert "no such local session" in run(session_exec, {"name": "nope", "backend": "local", "state_dir": live["root"],
                                                         "command": "true"})["msg"]


# --- the Nomad path: the API double for the look-ups, the local session's real sshd for the ssh ---

@pytest.fixture
def nomad(nomad_double_factory: t.Any, live: t.Dict[str, t.Any], run: ModuleRun) -> NomadAPIDouble:
    """A double holding session ``NAME`` whose main1 publishes ssh where the local session's main1 does, and whose
    keypair variable holds the local session's keys."""
    double = nomad_standing_in(nomad_double_factory, live, run, {})
    put_keypair(double, live, *local_keypair(live))
    return double


def nomad_standing_in(factory: t.Any, live: t.Dict[str, t.Any], run: ModuleRun, extra: t.Dict[str, t.Any],
                      **spec: t.Any) -> NomadAPIDouble:
    """A double holding session ``NAME`` (8 containers, registered by the session module with ``spec`` and the module
    options ``extra``) whose main1 allocation publishes ssh where the local session's main1 does."""
    double = factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=16000, memory=32768, address="127.0.0.1")
    made = run(session_module, dict({"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": dict({
        "name": NAME, "image": "python:3.11-slim", "cluster_size": len(HOSTS), "resources": {"cpu": 1000, "memory": 1024}},
        **spec)}, **extra))
    assert not made.get("failed"), made.get("msg")
    host, port = live["view"]["main1"]["address"], live["view"]["main1"]["ssh_port"]
    assert host == "127.0.0.1" and port
    main1 = next(a["ID"] for a in double.allocations_of(NAME) if a["TaskGroup"] == "main1")
    with double.model.lock:  # what the client's port mapping gave main1's ssh port (here: the local session's)
        for p in double.model.allocs[main1]["Ports"]:
            if p["Label"] == "ssh":
                p["Value"] = port
    return double


def local_keypair(live: t.Dict[str, t.Any]) -> t.Tuple[str, str]:
    session_dir = os.path.join(live["root"], NAME)
    with open(os.path.join(session_dir, "ssh", "id_cluster"), encoding="utf-8") as f:
        private = f.read()
    with open(os.path.join(session_dir, "ssh", "id_cluster.pub"), encoding="utf-8") as f:
        public = f.read().strip()
    return private, public


def put_keypair(double: NomadAPIDouble, live: t.Dict[str, t.Any], private: str, public: str) -> None:
    answer = requests.put(double.url + "/v1/var/nomad/jobs/" + NAME, headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5,
                          json={"Namespace": "default", "Path": "nomad/jobs/" + NAME,
                                "Items": {PRIVATE_KEY_ITEM: private, PUBLIC_KEY_ITEM: public}})
    assert answer.status_code == 200, answer.text


def exec_nomad(run: ModuleRun, double: NomadAPIDouble, **args: t.Any) -> t.Dict[str, t.Any]:
    return run(session_exec, dict({"name": NAME, "nomad_addr": double.url, "token": NOMAD_TOKEN}, **args))


def test_nomad_path_through_main1_and_the_session_network(run: ModuleRun, live: t.Dict[str, t.Any],
                                                          nomad: NomadAPIDouble) -> None:
    command = "h=$(hostname); echo $h $(id -u); echo err-$h >&2; [ $h != sub6 ] || exit 5"
    result = exec_nomad(run, nomad, command=command)
    assert result["failed"] is True and result["backend"] == "nomad" and result["failed_hostnames"] == ["sub6"]
    assert [c["hostname"] for c in result["containers"]] == HOSTS
    for c in result["containers"]:
        assert (c["stdout"], c["stderr"]) == ("%s 1000\n" % c["hostname"], "err-%s\n" % c["hostname"])
        assert (c["result"], c["exit_code"]) == (("failed", 5) if c["hostname"] == "sub6" else ("ok", 0))
    private, _public = local_keypair(live)
    assert not [line for line in private_key_lines(private) if any(line in out for out in run.outputs)]
    subs = exec_nomad(run, nomad, command="hostname", roles=["sub"], hostnames=["sub7"])
    assert [c["hostname"] for c in subs["containers"]] == HOSTS[1:] and not subs.get("failed")


def test_nomad_path_refuses_root_and_skips_what_is_not_running(run: ModuleRun, nomad: NomadAPIDouble) -> None:
    root = exec_nomad(run, nomad, command="id -u", user="root")
    assert root["failed"] is True and "PermitRootLogin no" in root["msg"] and "work" in root["msg"]
    sub2 = next(a["ID"] for a in nomad.allocations_of(NAME) if a["TaskGroup"] == "sub2")
    nomad.set_alloc_status(sub2, "failed", task_state="dead", failed=True)
    result = exec_nomad(run, nomad, command="hostname", hostnames=["sub1", "sub2"])
    assert result["failed"] is True and result["failed_hostnames"] == ["sub2"]
    assert by_host(result)["sub2"]["result"] == "not_running" and by_host(result)["sub1"]["stdout"] == "sub1\n"


def test_nomad_path_refuses_a_main1_that_is_not_the_sessions(run: ModuleRun, live: t.Dict[str, t.Any],
                                                              nomad: NomadAPIDouble) -> None:
    """The variable's public key is another keypair's: main1's host key (the session key) does not match it, so the
    ssh client refuses main1 before anything runs, though the private key would log in."""
    private, _public = local_keypair(live)
    put_keypair(nomad, live, private, generate_keypair("ed25519").public_key)
    result = exec_nomad(run, nomad, command="hostname", fail_on="none")
    assert {c["result"] for c in result["containers"]} == {"unreachable"}
    assert "host key" in result["containers"][0]["reason"].lower()



def test_nomad_path_with_the_keypair_in_vault(run: ModuleRun, live: t.Dict[str, t.Any], nomad_double_factory: t.Any,
                                               vault_double: t.Any) -> None:
    vault = {"vault_addr": vault_double.url, "vault_token": VAULT_TOKEN}
    double = nomad_standing_in(nomad_double_factory, live, run, vault, secrets={
        "backend": "vault", "mount": "secret", "path": "backendai/sessions", "role": "backendai"})
    private, public = local_keypair(live)
    answer = requests.post(vault_double.url + "/v1/secret/data/backendai/sessions/" + NAME, timeout=5,
                           headers={"X-Vault-Token": VAULT_TOKEN},
                           json={"data": {PRIVATE_KEY_ITEM: private, PUBLIC_KEY_ITEM: public}})
    assert answer.status_code == 200, answer.text
    result = exec_nomad(run, double, command="hostname", hostnames=["main1", "sub4"], **vault)
    assert not result.get("failed"), result.get("msg")
    assert [c["stdout"] for c in result["containers"]] == ["main1\n", "sub4\n"]
    assert not [line for line in private_key_lines(private) if any(line in out for out in run.outputs)]

def test_results_of_both_backends_match_return(run: ModuleRun, live: t.Dict[str, t.Any], nomad: NomadAPIDouble) -> None:
    results = Results(session_exec)
    results.add(exec_local(run, live, command="hostname"), "local")
    results.add(exec_local(run, live, command="exit 3", hostnames=["sub1"], fail_on="none"), "local, failing")
    results.add(run(session_exec, {"name": NAME, "backend": "local", "state_dir": live["root"], "command": "true"},
                    check=True), "check mode")
    results.add(exec_nomad(run, nomad, command="hostname", roles=["main"]), "nomad")
    assert not results.problems, results.problems
    assert results.never_returned() == []


#: What a process sees of its container: identity, capabilities, seccomp and no-new-privileges, cgroups (the memory
#: and pids limits apply only inside them), rlimits, umask, working directory and environment.
PROBE = ("id; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; cat /proc/self/cgroup; ulimit -a; umask; pwd; "
         "env | grep -v -E '^(PWD|SHLVL|_)=' | sort")


@pytest.mark.parametrize("user", ["session", "root"])
def test_runc_exec_gives_the_process_podman_exec_gives(run: ModuleRun, live: t.Dict[str, t.Any], user: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap way in (``runc exec`` with the container's own process spec, ``_local.runc_exec``) is taken, and the
    command sees exactly what it sees through ``podman exec`` (the fallback, forced here by hiding the inspect)."""
    from ansible_collections.backendai.cluster.plugins.module_utils._local import session_exec as local_exec
    tools: t.List[str] = []
    real_exec_one = local_exec._exec_one

    def spy(container: t.Any, request: t.Any, command: t.List[str], env: t.Any, runc_log: t.Any) -> t.Any:
        tools.append(os.path.basename(command[0]))
        return real_exec_one(container, request, command, env, runc_log)

    monkeypatch.setattr(local_exec, "_exec_one", spy)
    monkeypatch.setattr(local_exec, "CHANNEL", False)  # the exec channel's own equivalence: test_session_exec_channel.py
    cheap = exec_local(run, live, command=PROBE, user=user, hostnames=["main1", "sub3"])
    assert tools == ["runc", "runc"] and not cheap.get("failed"), cheap.get("msg")
    monkeypatch.setattr(local_exec, "_inspect", lambda engines, env: {})
    tools.clear()
    engine = exec_local(run, live, command=PROBE, user=user, hostnames=["main1", "sub3"])
    assert tools == ["podman", "podman"] and not engine.get("failed"), engine.get("msg")
    for a, b in zip(cheap["containers"], engine["containers"]):
        assert a["stdout"] == b["stdout"] and a["stderr"] == b["stderr"] == ""
    text = cheap["containers"][1]["stdout"]
    assert "memory:/" in text and "pids:/" in text and "BACKENDAI_SESSION_ID=" in text
    assert ("uid=0(root)" in text) == (user == "root")
    cgroups = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2
               and line.split(":", 1)[0].isdigit()}
    assert cgroups["memory"] != "/" and cgroups["memory"] == cgroups["pids"]  # the container's, not the host's root


def test_runc_exec_reports_a_missing_program_as_a_shell_would(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    result = exec_local(run, live, argv=["no-such-program-here"], hostnames=["sub2"])
    sub2 = by_host(result)["sub2"]
    assert (sub2["result"], sub2["exit_code"]) == ("failed", 127) and "no-such-program-here" in sub2["stderr"]
