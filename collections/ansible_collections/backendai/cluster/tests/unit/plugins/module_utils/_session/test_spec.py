# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Spec validation: defaults, and messages that name the field, the value and what is allowed."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import spec_dict


def problems(raw: t.Any) -> t.List[str]:
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    return [str(p) for p in err.value.problems]


def test_defaults() -> None:
    spec = parse_spec({"name": "s", "image": "img"})
    assert spec.cluster_size == 1 and spec.cluster_mode == "single-node"
    assert [(r.name, r.replicas) for r in spec.roles] == [("main", 1)]
    assert spec.ssh.key_type == "ed25519" and spec.ssh.port == 2200 and spec.master_port == 12345
    assert spec.secrets.backend == "nomad-variables" and spec.network_mode == "auto"
    assert spec.resources.cpu == 1000 and spec.resources.memory == 1024 and spec.resources.gpu == 0
    assert spec.strategy == "concentrated" and spec.driver == "docker" and spec.command == ()


def test_homogeneous_roles_main_plus_subs() -> None:
    spec = parse_spec(spec_dict(cluster_size=4))
    assert [(r.name, r.replicas) for r in spec.roles] == [("main", 1), ("sub", 3)]


def test_every_problem_reported_at_once_with_path_value_and_allowed() -> None:
    got = problems({"name": "bad name!", "image": "", "cluster_size": 0, "cluster_mode": "cluster",
                    "resources": {"cpu": -5, "memory": "lots", "gpu": 1.5}, "ssh": {"key_type": "dsa", "port": 70000},
                    "colour": "blue"})
    text = "\n".join(got)
    assert len(got) == 10, text
    assert "session.name: must be 1 to 64 letters, digits, '-' or '_' (it is the Nomad job ID) (got \"bad name!\")" in got
    assert 'session.image: must be a non-empty string (the container image, e.g. python:3.11-slim) (got "")' in got
    assert "session.cluster_size: must be an integer from 1 to 4096 (containers in total, main included) (got 0)" in got
    assert 'session.cluster_mode: must be one of: single-node, multi-node (got "cluster")' in got
    assert "session.resources.cpu: must be an integer ≥ 1 (MHz per container) (got -5)" in got
    assert 'session.resources.memory: must be an integer ≥ 1 (MB per container) (got "lots")' in got
    assert "session.resources.gpu: must be an integer ≥ 0 (GPU devices per container) (got 1.5)" in got
    assert 'session.ssh.key_type: must be one of: ed25519, rsa (got "dsa")' in got
    assert "session.ssh.port: must be an integer from 1 to 65535 (sshd port in every container) (got 70000)" in got
    assert any(p.startswith("session.colour: unknown key; allowed keys: name, image,") for p in got)


def test_error_message_is_one_readable_block() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"image": "x"})
    assert str(err.value) == ("session spec is invalid (1 problem):\n  - session.name: is required: 1 to 64 letters, "
                              "digits, '-' or '_' (it is the Nomad job ID)")


def test_not_a_mapping() -> None:
    assert problems(["name"]) == ['session: must be a mapping with at least name and image (got ["name"])']


@pytest.mark.parametrize("name", ["BACKENDAI_CLUSTER_HOST", "WORLD_SIZE", "RANK", "TF_CONFIG", "MASTER_ADDR"])
def test_user_env_cannot_override_cluster_variables(name: str) -> None:
    got = problems(spec_dict(env={name: "x"}))
    assert len(got) == 1 and got[0].startswith("session.env.%s: is set by the cluster session itself" % name)


def test_env_names_and_values() -> None:
    got = problems(spec_dict(env={"1BAD": "x", "OK": {"nested": 1}}))
    assert got == ["session.env.1BAD: is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                   'session.env.OK: must be a string, number or boolean (got {"nested": 1})']
    spec = parse_spec(spec_dict(env={"N": 3, "B": True}))
    assert dict(spec.env) == {"N": "3", "B": "true"}


def test_rsa_bits() -> None:
    assert parse_spec(spec_dict(ssh={"key_type": "rsa"})).ssh.key_bits == 3072
    assert problems(spec_dict(ssh={"key_type": "rsa", "key_bits": 1024})) == [
        "session.ssh.key_bits: must be an integer from 2048 to 16384 (RSA key size in bits) (got 1024)"]
    assert problems(spec_dict(ssh={"key_bits": 4096}))[0].startswith("session.ssh.key_bits: is only allowed with key_type rsa")


def test_master_port_must_differ_from_ssh_port() -> None:
    assert problems(spec_dict(master_port=2200)) == ["session.master_port: must differ from ssh.port (2200) (got 2200)"]


@pytest.mark.parametrize("mode", ["bridge", "cni/overlay-1", "host"])
def test_auto_is_the_only_network_mode(mode: str) -> None:
    assert parse_spec(spec_dict(network={"mode": "auto"})).network_mode == "auto"
    (problem,) = problems(spec_dict(network={"mode": mode}))
    assert problem.startswith("session.network.mode: must be auto (every session gets a private network")
    assert "Nomad's shared bridge" in problem and problem.endswith('(got "%s")' % mode)


def test_mounts() -> None:
    spec = parse_spec(spec_dict(mounts=[{"source": "/data/proj", "target": "/home/work/data", "read_only": True}]))
    assert spec.mounts[0].read_only is True
    got = problems(spec_dict(mounts=[{"source": "data", "target": "/a"}, {"source": "/x", "target": "/a", "rw": 1}]))
    assert 'session.mounts[0].source: must be an absolute path without \'..\' (got "data")' in got
    assert 'session.mounts[1].target: is mounted twice (got "/a")' in got
    assert any(p.startswith("session.mounts[1].rw: unknown key") for p in got)


def test_vault_secrets() -> None:
    spec = parse_spec(spec_dict(secrets={"backend": "vault", "mount": "kv", "path": "backendai", "role": "bai"}))
    assert (spec.secrets.backend, spec.secrets.mount, spec.secrets.path, spec.secrets.role) == ("vault", "kv", "backendai", "bai")
    assert problems(spec_dict(secrets={"role": "x"}))[0].startswith("session.secrets.role: is only used with backend vault")


def test_roles_rules() -> None:
    spec = parse_spec(spec_dict(roles=[{"name": "main"}, {"name": "worker", "replicas": 3}]))
    assert spec.cluster_size == 4 and spec.heterogeneous
    got = problems(spec_dict(cluster_size=5, roles=[{"name": "main", "replicas": 2}, {"name": "worker1", "replicas": 3},
                                                    {"name": "worker1"}]))
    assert "session.roles[0].replicas: must be 1 for role main (there is exactly one main1) (got 2)" in got
    assert any(p.startswith("session.roles[1].name: must be a lowercase DNS label") for p in got)
    assert "session.cluster_size: must equal the sum of roles[].replicas (4) (got 5)" not in got  # bad roles are skipped
    got = problems(spec_dict(roles=[{"name": "worker", "replicas": 2}]))
    assert got == ['session.roles: must contain exactly one role named main (with replicas 1) (got ["worker"])']
    got = problems(spec_dict(cluster_size=5, roles=[{"name": "main"}, {"name": "worker", "replicas": 3}]))
    assert got == ["session.cluster_size: must equal the sum of roles[].replicas (4) (got 5)"]
    got = problems(spec_dict(roles=[{"name": "main"}, {"name": "ps"}, {"name": "ps"}]))
    assert got == ['session.roles[2].name: is used by two roles (got "ps")']


def test_published_ports() -> None:
    spec = parse_spec(spec_dict(ports=[{"label": "jupyter", "port": 8888}]))
    assert spec.ports[0].label == "jupyter"
    got = problems(spec_dict(ports=[{"label": "ssh", "port": 8888}, {"label": "web", "port": 12345}]))
    assert 'session.ports[0].label: is used twice (ssh is reserved for the session\'s sshd) (got "ssh")' in got
    assert "session.ports[1].port: collides with the ssh port or master_port (got 12345)" in got


def test_command_must_be_argv() -> None:
    assert problems(spec_dict(command="python train.py")) == [
        'session.command: must be a list of strings (argv, e.g. [python, train.py]) (got "python train.py")']


@pytest.mark.parametrize("target, hidden, relation", [
    ("/proc", "/proc", "is"), ("/proc/sys", "/proc", "lies inside"), ("/sys", "/sys", "is"),
    ("/sys/fs/cgroup", "/sys", "lies inside"), ("/dev", "/dev", "is"), ("/dev/shm/x", "/dev", "lies inside"),
    ("//proc/", "/proc", "is"), ("/proc/.", "/proc", "is"),
    ("/", "/proc", "holds"), ("/etc", "/etc/hosts", "holds"), ("/etc/hosts", "/etc/hosts", "is"),
    ("/etc/passwd", "/etc/passwd", "is"), ("/etc/group", "/etc/group", "is"), ("/etc/shadow", "/etc/shadow", "is"),
    ("/etc/nsswitch.conf", "/etc/nsswitch.conf", "is"), ("/etc/resolv.conf", "/etc/resolv.conf", "is"),
    ("/etc/hostname", "/etc/hostname", "is"),
    ("/opt", "/opt/backendai-runtime", "holds"), ("/opt/backendai-runtime", "/opt/backendai-runtime", "is"),
    ("/opt/backendai-runtime/bin", "/opt/backendai-runtime", "lies inside"),
    ("/run", "/run/backendai", "holds"), ("/run/backendai", "/run/backendai", "is"), ("/run/sshd", "/run/sshd", "is"),
    ("/local", "/local", "is"), ("/local/backendai", "/local", "lies inside"), ("/secrets", "/secrets", "is"),
    ("/alloc/data", "/alloc", "lies inside"),
    ("/home", "/home/work/.ssh", "holds"), ("/home/work", "/home/work/.ssh", "holds"),
    ("/home/work/.ssh", "/home/work/.ssh", "is"), ("/home/work/.ssh/authorized_keys", "/home/work/.ssh", "lies inside"),
])
def test_mount_targets_that_would_hide_what_the_container_start_provides_are_refused(
        target: str, hidden: str, relation: str) -> None:
    raw = {"name": "s", "image": "img", "mounts": [{"source": "/data", "target": "/data"}, {"source": "/data", "target": target}]}
    (problem,) = problems(raw)
    assert problem.startswith("session.mounts[1].target: %s %s, which the container start provides: " % (relation, hidden)), \
        problem
    assert "A mount there would hide it" in problem and target in problem


def test_the_session_users_own_ssh_dir_is_refused_where_the_user_is() -> None:
    raw = {"name": "s", "image": "img", "user": {"name": "alice", "uid": 2000, "gid": 2000},
           "mounts": [{"source": "/data", "target": "/home/alice/.ssh"}, {"source": "/data", "target": "/home/work/.ssh"}]}
    (problem,) = problems(raw)
    assert problem.startswith("session.mounts[0].target: is /home/alice/.ssh, which the container start provides: "
                              "the session user's SSH keys"), problem


def test_the_runtime_bundle_target_is_where_the_nomad_job_mounts_the_bundle() -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import RUNTIME_MOUNT
    from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import RUNTIME_BUNDLE_TARGET
    assert RUNTIME_BUNDLE_TARGET == RUNTIME_MOUNT


@pytest.mark.parametrize("target", ["/procs", "/device", "/home/work/proc", "/system", "/home/work/data", "/etc/myapp",
                                    "/opt/data", "/run/data", "/localdata", "/etc/hosts.d", "/home/workspace"])
def test_mount_targets_that_only_look_alike_are_fine(target: str) -> None:
    parse_spec({"name": "s", "image": "img", "mounts": [{"source": "/data", "target": target}]})


@pytest.mark.parametrize("source, protected", [
    ("/etc/backendai-cluster", "/etc/backendai-cluster"),                 # the agent's network key
    ("/etc/backendai-cluster/network.key", "/etc/backendai-cluster"),
    ("/etc", "/etc/backendai-cluster"), ("/", "/etc/backendai-cluster"),  # a directory above it exposes it too
    ("//etc/./backendai-cluster/", "/etc/backendai-cluster"),
    ("/usr/lib/backendai-cluster", "/usr/lib/backendai-cluster"),         # the plugin's code, run as root
    ("/run/backendai-cluster/cni", "/run/backendai-cluster"),             # the plugin's state
    ("/run", "/run/backendai-cluster"),
    ("/run/backendai-cluster-mounts/0", "/run/backendai-cluster-mounts"),
    ("/root/.config/backendai-cluster", "~/.config/backendai-cluster"),   # the control node's cluster key
    ("/home/alice/.config", "~/.config/backendai-cluster"), ("/home/alice", "~/.config/backendai-cluster"),
    ("/home", "~/.config/backendai-cluster"), ("/root", "~/.config/backendai-cluster"),
    ("/root/.local/state/backendai-cluster/sessions", "~/.local/state/backendai-cluster"),  # local state dirs
    ("/home/alice/.local/state", "~/.local/state/backendai-cluster"),
    ("/srv/nfs/root/.config/backendai-cluster", "~/.config/backendai-cluster"),  # a copied home anywhere
])
def test_key_and_state_paths_are_refused_as_mount_sources(source: str, protected: str) -> None:
    """A container that can read the network key signs args for any session: its path, what lies below it and
    every directory above it are refused as mount sources, by the spec, so on both backends."""
    (problem,) = problems({"name": "s", "image": "img", "mounts": [{"source": source, "target": "/data"}]})
    assert problem.startswith("session.mounts[0].source: must not be %s, below it or a directory above it" % protected), problem
    assert '(got "%s")' % source in problem


@pytest.mark.parametrize("source", ["/etc/backendai", "/srv/backendai-cluster", "/run/backendai", "/home/alice/data",
                                    "/root/.config/other", "/home/alice/.local/share", "/usr/lib/cnix", "/data/.config"])
def test_sources_that_only_look_alike_are_fine(source: str) -> None:
    parse_spec({"name": "s", "image": "img", "mounts": [{"source": source, "target": "/data"}]})


def test_the_user_is_work_1000_by_default_and_its_ids_are_configurable() -> None:
    user = parse_spec({"name": "s", "image": "img"}).user
    assert (user.name, user.uid, user.gid, user.home, user.is_root) == ("work", 1000, 1000, "/home/work", False)
    user = parse_spec({"name": "s", "image": "img", "user": {"name": "alice", "uid": 70001, "gid": "2000"}}).user
    assert (user.name, user.uid, user.gid, user.home) == ("alice", 70001, 2000, "/home/alice")


def test_root_only_when_the_spec_says_so() -> None:
    assert problems({"name": "s", "image": "i", "user": {"name": "root"}}) == [
        'session.user.name: is root: logins and the command would run with every privilege of the container; set '
        'user.allow_root: true to allow that, or use an unprivileged name such as work (got "root")']
    root = parse_spec({"name": "s", "image": "i", "user": {"name": "root", "allow_root": True}}).user
    assert (root.uid, root.gid, root.home, root.is_root) == (0, 0, "/root", True)
    # uid/gid 0 is root under another name: refused whatever allow_root says
    got = problems({"name": "s", "image": "i", "user": {"uid": 0, "gid": 0, "allow_root": True}})
    assert [p.split(":")[0] for p in got] == ["session.user.uid", "session.user.gid"]
    assert "is root's uid: an unprivileged user needs an id from 1 to 4294967294" in got[0] and got[0].endswith("(got 0)")
    assert problems({"name": "s", "image": "i", "user": {"name": "root", "allow_root": True, "uid": 5}}) == [
        "session.user.uid: must be 0 for user root (or omitted) (got 5)"]


def test_user_ids_given_as_strings_are_checked_as_the_numbers_they_are() -> None:
    # a templated id ("{{ uid }}") arrives as a string: nobody's and root's ids are refused all the same
    got = problems({"name": "s", "image": "i", "user": {"uid": "65534", "gid": "0"}})
    assert [p.split(":")[0] for p in got] == ["session.user.uid", "session.user.gid"]
    assert "is nobody's uid" in got[0] and "is root's gid" in got[1]
    root = parse_spec({"name": "s", "image": "i", "user": {"name": "root", "allow_root": True, "uid": "0"}}).user
    assert (root.name, root.uid, root.gid) == ("root", 0, 0)
    user = parse_spec({"name": "s", "image": "i", "user": {"uid": "1001", "gid": "1002"}}).user
    assert (user.uid, user.gid) == (1001, 1002)


def test_user_problems_name_field_value_and_what_is_allowed() -> None:
    user = {"name": "Work", "uid": -1, "gid": 65534, "allow_root": "yes", "home": "/srv"}
    got = problems({"name": "s", "image": "i", "user": user})
    assert got == [
        "session.user.home: unknown key; allowed keys: name, uid, gid, allow_root",
        "session.user.name: must be a user name: a lowercase letter or '_', then up to 31 lowercase letters, digits, "
        "'_' or '-' (e.g. work) (got \"Work\")",
        'session.user.allow_root: must be true or false (got "yes")',
        "session.user.uid: must be an integer from 1 to 4294967294 (the user's uid, e.g. the owner of the mounted "
        "data) (got -1)",
        "session.user.gid: is nobody's gid (65534, the overflow id); choose another id from 1 to 4294967294 (got 65534)"]
    assert problems({"name": "s", "image": "i", "user": {"name": "sshd"}}) == [
        'session.user.name: is a system account the containers need (sshd, nobody); choose another name, e.g. work '
        '(got "sshd")']
