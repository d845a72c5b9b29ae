# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad job: one group per container, env from Meta, no secrets, linear size, deterministic."""

from __future__ import annotations

import ast
import json
import os
import re
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.hosts import HOSTS_SCRIPT
from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    DISCONNECT,
    ENTRYPOINT,
    HOSTS_SCRIPT_META_KEY,
    RESCHEDULE,
    RUNTIME_DIR,
    RUNTIME_MOUNT,
    RUNTIME_PURPOSE,
    RUNTIME_VERSION,
    RUNTIME_VOLUME,
    TASK_USER,
    dumps,
    host_volume_name,
    host_volumes_needed,
    register_request,
    render_job,
    service_name,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import group_identity
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import HostVolume, parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id, generate_keypair
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import agents_list, make_plan, spec_dict

META_REF = re.compile(r"\$\{NOMAD_META_([A-Za-z0-9_]+)\}")


def interpolate(value: str, meta: t.Mapping[str, str]) -> str:
    """What Nomad does to an Env value: replace ${NOMAD_META_<key>} with the job Meta value."""
    return META_REF.sub(lambda m: meta[m.group(1)], value)


def multi_node_plan() -> t.Any:
    return make_plan(agents_list(("a1", 2000, 4096, 1), ("a2", 2000, 4096, 1)), cluster_size=4, cluster_mode="multi-node",
                     resources={"cpu": 1000, "memory": 2048, "gpu": 0}, env={"FOO": "bar"},
                     ports=[{"label": "jupyter", "port": 8888}], mounts=[{"source": "/d", "target": "/data"}])


def test_one_group_per_container_pinned_to_its_agent() -> None:
    plan = multi_node_plan()
    job = render_job(plan)
    assert [g["Name"] for g in job["TaskGroups"]] == ["main1", "sub1", "sub2", "sub3"]
    for group, container in zip(job["TaskGroups"], plan.containers):
        assert "Count" not in group  # Nomad's default, 1 (api/tasks.go TaskGroup.Canonicalize)
        assert group["Constraints"] == [{"LTarget": "${node.unique.name}", "RTarget": container.agent, "Operand": "="}]
        assert group["Meta"] == {"backendai_agent": container.agent}
        assert group_identity(group) == (container.role, str(container.idx))
        assert group["Networks"][0]["Mode"] == "cni/backendai"
        assert group["Networks"][0]["Hostname"] == container.hostname
        assert group["Services"][0]["Tags"][0] == container.hostname
        assert group["Services"][0]["Provider"] == "nomad" and group["Services"][0]["AddressMode"] == "alloc"


def test_env_from_meta_equals_the_literal_container_env() -> None:
    plan = multi_node_plan()
    job = render_job(plan)
    for group, container in zip(job["TaskGroups"], plan.containers):
        env = {k: interpolate(v, job["Meta"]) for k, v in group["Tasks"][0]["Env"].items()}
        assert env == container_env(plan, container)  # the seeds' variables, nothing else


def test_session_wide_values_are_only_in_meta() -> None:
    job = render_job(multi_node_plan())
    assert job["Meta"]["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1,sub2,sub3"
    text = json.dumps(job["TaskGroups"])
    assert "main1,sub1" not in text and "sub3:12345" not in text


def test_only_main1_publishes_ports() -> None:
    job = render_job(multi_node_plan())
    nets = [g["Networks"][0] for g in job["TaskGroups"]]
    assert nets[0]["DynamicPorts"] == [{"Label": "ssh", "To": 2200}, {"Label": "jupyter", "To": 8888}]
    assert all("DynamicPorts" not in n and "ReservedPorts" not in n for n in nets[1:])


def test_single_node_uses_the_session_network_too() -> None:
    """Nomad's shared bridge network is never rendered: one agent or several, every group is on cni/backendai."""
    job = render_job(make_plan(cluster_size=3))
    assert {g["Networks"][0]["Mode"] for g in job["TaskGroups"]} == {"cni/backendai"}
    assert job["Datacenters"] == ["dc1"]
    assert job["Constraints"] == [{"LTarget": "${attr.nomad.version}", "RTarget": ">= 1.10.0", "Operand": "semver"},
                                  {"LTarget": "${attr.plugins.cni.version.backendai}", "Operand": "is_set"}]


def test_no_secret_in_the_job_and_keys_rendered_at_runtime() -> None:
    keys = generate_keypair()
    spec = parse_spec(spec_dict(cluster_size=2))
    plan = build_plan(spec, parse_agents(agents_list(("a", 9000, 9000, 0))), derive_session_id(spec.name, keys.public_key))
    text = dumps(register_request(render_job(plan)))
    body = "".join(keys.private_key.strip().splitlines()[1:-1])
    for chunk in (body[i:i + 16] for i in range(0, len(body), 16)):
        assert chunk not in text
    assert keys.public_key.split()[1] not in text
    templates = render_job(plan)["TaskGroups"][1]["Tasks"][0]["Templates"]
    key_tmpl = templates[0]
    assert key_tmpl == {"EmbeddedTmpl": '{{ with nomadVar "nomad/jobs/train-42" }}{{ .ssh_private_key }}{{ end }}',
                        "DestPath": "secrets/backendai/id", "Perms": "0600", "ChangeMode": "noop"}


def test_vault_backend() -> None:
    plan = make_plan(secrets={"backend": "vault", "mount": "kv", "path": "backendai", "role": "bai-sessions"})
    task = render_job(plan)["TaskGroups"][0]["Tasks"][0]
    assert task["Vault"] == {"ChangeMode": "noop", "Role": "bai-sessions"}
    assert task["Templates"][0]["EmbeddedTmpl"] == (
        '{{ with secret "kv/data/backendai/train-42" }}{{ .Data.data.ssh_private_key }}{{ end }}')


def test_gpu_devices_and_driver_config() -> None:
    plan = make_plan(agents_list(("g", 9000, 9000, 2)), cluster_size=2, resources={"gpu": 1},
                     mounts=[{"source": "/d", "target": "/data", "read_only": True}])
    task = render_job(plan)["TaskGroups"][0]["Tasks"][0]
    assert task["Resources"] == {"CPU": 1000, "MemoryMB": 1024, "Devices": [{"Name": "nvidia/gpu", "Count": 1}]}
    # the bundle's shell runs the entrypoint: an image needs none of its own
    assert task["Config"] == {"image": "python:3.11-slim", "entrypoint": [RUNTIME_MOUNT + "/bin/sh", "/local/backendai/entrypoint.sh"],
                              "args": ["python", "train.py"]}


@pytest.mark.parametrize("driver", ["docker", "podman"])
def test_mounts_are_host_volumes_never_bind_mounts(driver: str) -> None:
    """A spec mount is a Nomad host volume the operator declared (group ``volume`` + task ``volume_mount``, read-only
    where the spec says so): no docker ``mount``/``volumes`` in the driver config, so the docker driver's
    ``volumes`` can stay disabled and no job reaches a host path the operator did not declare."""
    plan = make_plan(agents_list(("a", 9000, 9000, 0)), cluster_size=2, driver=driver,
                     mounts=[{"source": "/srv/datasets", "target": "/data", "read_only": True},
                             {"source": "/srv/scratch/", "target": "/scratch"}])
    job = render_job(plan)
    for group in job["TaskGroups"]:
        assert group["Volumes"] == {
            "runtime": {"Name": "runtime", "Type": "host", "Source": RUNTIME_VOLUME, "ReadOnly": True},
            "mount0": {"Name": "mount0", "Type": "host", "Source": host_volume_name("/srv/datasets"), "ReadOnly": True},
            "mount1": {"Name": "mount1", "Type": "host", "Source": host_volume_name("/srv/scratch")}}  # ReadOnly: false
        task = group["Tasks"][0]
        assert task["VolumeMounts"] == [{"Volume": "runtime", "Destination": RUNTIME_MOUNT, "ReadOnly": True},
                                        {"Volume": "mount0", "Destination": "/data", "ReadOnly": True},
                                        {"Volume": "mount1", "Destination": "/scratch"}]  # ReadOnly: false
        assert not {"mount", "mounts", "volumes", "volume_driver"} & set(task["Config"])
    assert "/srv/datasets" not in dumps(job)  # the host path is the operator's declaration, not the job's
    assert list(render_job(make_plan())["TaskGroups"][0]["Volumes"]) == ["runtime"]


def test_every_group_mounts_the_runtime_bundle_read_only_and_nodes_must_declare_it() -> None:
    """The session runtime bundle (sshd/ssh for images without them) is a read-only host volume in every group,
    named after the bundle's layout version, and the planner requires it of every node like the spec's mounts."""
    job = render_job(make_plan(agents_list(("a", 9000, 9000, 0), ("b", 9000, 9000, 0)), cluster_size=3))
    for group in job["TaskGroups"]:
        assert group["Volumes"]["runtime"] == {"Name": "runtime", "Type": "host", "Source": RUNTIME_VOLUME, "ReadOnly": True}
        assert {"Volume": "runtime", "Destination": RUNTIME_MOUNT, "ReadOnly": True} in group["Tasks"][0]["VolumeMounts"]
    assert job["Meta"]["BACKENDAI_RUNTIME_VERSION"] == RUNTIME_VERSION and RUNTIME_VOLUME.endswith("-v" + RUNTIME_VERSION)
    assert host_volumes_needed(()) == (HostVolume(RUNTIME_VOLUME, True, RUNTIME_DIR, RUNTIME_PURPOSE),)


BUNDLER = os.path.join(os.path.dirname(__file__), *[os.pardir] * 5, "roles", "overlay_agent", "files", "backendai-runtime-bundle")


def test_the_runtime_mount_has_one_source() -> None:
    """Where tasks find the bundle: the volume_mount's Destination, the entrypoint's argv and its ``B=``, and the
    bundle builder's MOUNT (run on agents without this package, it keeps its own copy: held equal here)."""
    assert "B=%s " % RUNTIME_MOUNT in ENTRYPOINT and "@RUNTIME_MOUNT@" not in ENTRYPOINT
    with open(BUNDLER, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    mounts = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
              and [getattr(target, "id", None) for target in node.targets] == ["MOUNT"]]
    assert mounts == [RUNTIME_MOUNT]


def test_host_volume_name_is_readable_unique_and_stable() -> None:
    name = host_volume_name("/srv/datasets/imagenet")
    assert re.match(r"^backendai-srv-datasets-imagenet-[0-9a-f]{8}$", name), name
    assert host_volume_name("/srv/datasets/imagenet/") == name  # the same directory
    assert host_volume_name("/srv/datasets-imagenet") != name  # same slug, another path
    assert host_volume_name("/") == "backendai-root-" + host_volume_name("/")[-8:]


def test_hosts_follow_the_peers() -> None:
    """The peers template re-renders when a registration changes (a replaced allocation has a new address)
    and runs the hosts script in the task, which rewrites /etc/hosts: no stale names after a replacement.
    The script is in job Meta once; the entrypoint writes it into the task as /local/backendai/hosts (with a
    shell the task has), runs it once and leaves it for the change script, which needs no shell in the image."""
    job = render_job(make_plan(cluster_size=3))
    assert job["Meta"][HOSTS_SCRIPT_META_KEY] == HOSTS_SCRIPT
    assert ("""{ echo "#!$X"; echo "set -- '$L/peers'"; echo "$NOMAD_META_%s"; } > $L/hosts.new""" % HOSTS_SCRIPT_META_KEY
            in ENTRYPOINT and "\n(. $L/hosts)\n" in ENTRYPOINT)  # run once in a subshell (a fork, no exec of a shell)
    assert ">> /etc/hosts" not in ENTRYPOINT
    assert dumps(job).count("backendai.cluster peers: begin") == 1  # once, in Meta
    for group in job["TaskGroups"]:
        templates = {tpl["DestPath"]: tpl for tpl in group["Tasks"][0]["Templates"]}
        peers = templates["local/backendai/peers"]
        assert peers["ChangeMode"] == "script"
        assert peers["ChangeScript"] == {"Command": "/local/backendai/hosts", "Timeout": 10 * 10 ** 9}
        assert group["Disconnect"] == DISCONNECT == {"LostAfter": 300 * 10 ** 9, "Replace": False, "Reconcile": "keep_original"}


def test_the_user_is_in_job_meta_and_the_task_asks_for_no_privileges() -> None:
    job = render_job(make_plan(cluster_size=2, user={"name": "alice", "uid": 4242, "gid": 4343}))
    assert {k: job["Meta"][k] for k in ("BACKENDAI_USER", "BACKENDAI_UID", "BACKENDAI_GID")} == {
        "BACKENDAI_USER": "alice", "BACKENDAI_UID": "4242", "BACKENDAI_GID": "4343"}
    assert render_job(make_plan())["Meta"]["BACKENDAI_USER"] == "work"
    for group in job["TaskGroups"]:
        task = group["Tasks"][0]
        # the entrypoint starts as the image's root (uid 0 over the image's USER) with the driver's default
        # capabilities, nothing more
        privileges = {"privileged", "cap_add", "devices", "security_opt", "userns_mode", "pid_mode", "ipc_mode",
                      "network_mode"}
        assert task["User"] == TASK_USER == "0" and not privileges & set(task["Config"])


def test_values_left_to_nomads_defaults_and_the_job_level_reschedule() -> None:
    """What the job leaves out is what Nomad fills in (api/tasks.go, api/jobs.go Canonicalize, run on every register
    and plan by command/agent/job_endpoint.go ApiJobToStructJob): Count 1, ReadOnly false, a template's Perms 0644;
    the no-reschedule policy is the job's, which Canonicalize copies into every group that has none."""
    job = render_job(make_plan(cluster_size=3, mounts=[{"source": "/d", "target": "/data"}]))
    assert job["Reschedule"] == RESCHEDULE == {"Attempts": 0, "Unlimited": False}
    for group in job["TaskGroups"]:
        assert not {"Count", "ReschedulePolicy"} & set(group)
        assert group["Volumes"]["mount0"] == {"Name": "mount0", "Type": "host", "Source": host_volume_name("/d")}
        templates = {tpl["DestPath"]: tpl for tpl in group["Tasks"][0]["Templates"]}
        assert "Perms" not in templates["secrets/backendai/id.pub"] and templates["secrets/backendai/id"]["Perms"] == "0600"


def test_job_type() -> None:
    assert render_job(make_plan())["Type"] == "batch"
    assert render_job(make_plan(command=None))["Type"] == "service"


def test_pending_plan_is_not_rendered() -> None:
    with pytest.raises(PlanError, match="PENDING"):
        render_job(make_plan(agents_list(("a", 1, 1, 0))))


def test_deterministic_bytes() -> None:
    assert dumps(render_job(multi_node_plan())) == dumps(render_job(multi_node_plan()))


def test_size_grows_linearly() -> None:
    def size(n: int) -> int:
        return len(dumps(render_job(make_plan(agents_list(("a", 10 ** 7, 10 ** 8, 0)), cluster_size=n)), pretty=False))
    per_64, per_512 = size(64) / 64, size(512) / 512
    assert per_512 / per_64 < 1.1  # constant bytes per container, not growing with N
    assert per_512 <= 3072


@pytest.mark.parametrize("job_id", ["train-42", "A_Very_Long_Name_" + "x" * 47, "___"])
def test_service_name_is_a_dns_label(job_id: str) -> None:
    name = service_name(job_id)
    assert re.match(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", name), name
    assert service_name(job_id) == name and service_name(job_id + "y") != name


def test_the_planner_and_the_job_agree_on_which_nodes_can_run_a_session() -> None:
    """``_nomad.nodes`` (loaded by the inventory plugin, so it imports neither the job nor the network code)
    writes the plugin attribute and the minimum client version out; they are the job's constraints."""
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job, nodes
    from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import MIN_NOMAD_VERSION

    assert nodes.PLUGIN_ATTRIBUTE == nomad_job.PLUGIN_ATTRIBUTE and nodes.MIN_CLIENT_VERSION == MIN_NOMAD_VERSION
    assert [nodes.is_min_version(v) for v in ("1.10.0", "1.10.3", "2.0.6", "v1.10.0+ent", "1.9.7", "1.10.0-rc.1", "", "x")] \
        == [True, True, True, True, False, False, False, False]
    assert nodes.duplicate_names([{"Name": "a", "ID": "2"}, {"Name": "a", "ID": "1"}, {"Name": "b", "ID": "3"},
                                  {"Name": "b", "ID": "4", "Status": "down"}]) == {"a": ["1", "2"]}
