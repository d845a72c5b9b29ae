# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The table ``_nomad.hcl`` writes a job with: for every struct of Nomad's job API, each key's jobspec
name and kind of value (:data:`STRUCTS`). A key missing here makes ``render_hcl`` fail instead of
dropping it. Pure data.
"""

from __future__ import annotations

import typing as t

# --- kinds of values ---------------------------------------------------------------------------

LABEL = "label"  # the block's label (job "<ID>", group "<Name>", port "<Label>" ...)
ATTR = "attr"  # a scalar attribute: string, number or bool
LIST = "list"  # a list of scalars
DURATION = "duration"  # integer nanoseconds, written as a Go duration string ("5m", "10s")
MAP = "map"  # map[string]string (meta, env): a block, or map assignment for non-identifier keys
MAP_ATTR = "map_attr"  # map[string]string that the jobspec takes only as an attribute (cni's ``args = {...}``)
BLOCK = "block"  # one nested struct, as a block
BLOCKS = "blocks"  # a list of structs, as repeated blocks (labelled when the struct has a LABEL)
BLOCK_MAP = "block_map"  # a map of label -> labelled struct (the group's Volumes), as repeated labelled blocks
CONFIG = "config"  # free-form driver config


class Field(t.NamedTuple):
    """How one API key is written in HCL."""

    hcl: str
    kind: str
    struct: str = ""  # for BLOCK / BLOCKS: the name of the nested struct's table
    omit_if_equal: str = ""  # leave out when equal to this sibling key (Name = ID is Nomad's default)


#: API struct name -> {API key: Field}. Order = order of the HCL output. Names follow the ``hcl``
#: struct tags of Nomad's ``api`` package and the jobspec docs.
STRUCTS: t.Dict[str, t.Dict[str, Field]] = {
    "Job": {
        "ID": Field("job", LABEL),
        "Name": Field("name", ATTR, omit_if_equal="ID"),
        "Namespace": Field("namespace", ATTR),
        "Region": Field("region", ATTR),
        "Type": Field("type", ATTR),
        "Priority": Field("priority", ATTR),
        "AllAtOnce": Field("all_at_once", ATTR),
        "NodePool": Field("node_pool", ATTR),
        "Datacenters": Field("datacenters", LIST),
        "UI": Field("ui", BLOCK, "JobUIConfig"),
        "Meta": Field("meta", MAP),
        "Constraints": Field("constraint", BLOCKS, "Constraint"),
        "Reschedule": Field("reschedule", BLOCK, "ReschedulePolicy"),
        "TaskGroups": Field("group", BLOCKS, "TaskGroup"),
    },
    "TaskGroup": {
        "Name": Field("group", LABEL),
        "Count": Field("count", ATTR),
        "ShutdownDelay": Field("shutdown_delay", DURATION),
        "Meta": Field("meta", MAP),
        "Constraints": Field("constraint", BLOCKS, "Constraint"),
        "Networks": Field("network", BLOCKS, "NetworkResource"),
        "Services": Field("service", BLOCKS, "Service"),
        "Volumes": Field("volume", BLOCK_MAP, "VolumeRequest"),
        "RestartPolicy": Field("restart", BLOCK, "RestartPolicy"),
        "ReschedulePolicy": Field("reschedule", BLOCK, "ReschedulePolicy"),
        "Disconnect": Field("disconnect", BLOCK, "DisconnectStrategy"),
        "Tasks": Field("task", BLOCKS, "Task"),
    },
    "VolumeRequest": {
        # api.VolumeRequest: Name `hcl:"name,label"`
        "Name": Field("volume", LABEL),
        "Type": Field("type", ATTR),
        "Source": Field("source", ATTR),
        "ReadOnly": Field("read_only", ATTR),
    },
    "DisconnectStrategy": {
        "LostAfter": Field("lost_after", DURATION),
        "StopOnClientAfter": Field("stop_on_client_after", DURATION),
        "Replace": Field("replace", ATTR),
        "Reconcile": Field("reconcile", ATTR),
    },
    "JobUIConfig": {
        "Description": Field("description", ATTR),
        "Links": Field("link", BLOCKS, "JobUILink"),
    },
    "JobUILink": {
        "Label": Field("label", ATTR),
        "URL": Field("url", ATTR),
    },
    "Constraint": {
        "LTarget": Field("attribute", ATTR),
        "Operand": Field("operator", ATTR),
        "RTarget": Field("value", ATTR),
    },
    "NetworkResource": {
        "Mode": Field("mode", ATTR),
        "Hostname": Field("hostname", ATTR),
        "DynamicPorts": Field("port", BLOCKS, "Port"),
        "CNI": Field("cni", BLOCK, "CNIConfig"),
    },
    "CNIConfig": {
        # api.CNIConfig: Args map[string]string `hcl:"args,optional"` (an attribute, not a block)
        "Args": Field("args", MAP_ATTR),
    },
    "Port": {
        "Label": Field("port", LABEL),
        "To": Field("to", ATTR),
        "HostNetwork": Field("host_network", ATTR),
    },
    "Service": {
        "Name": Field("name", ATTR),
        "Provider": Field("provider", ATTR),
        "AddressMode": Field("address_mode", ATTR),
        "PortLabel": Field("port", ATTR),
        "TaskName": Field("task", ATTR),
        "Tags": Field("tags", LIST),
    },
    "RestartPolicy": {
        "Attempts": Field("attempts", ATTR),
        "Interval": Field("interval", DURATION),
        "Delay": Field("delay", DURATION),
        "Mode": Field("mode", ATTR),
        "RenderTemplates": Field("render_templates", ATTR),
    },
    "ReschedulePolicy": {
        "Attempts": Field("attempts", ATTR),
        "Interval": Field("interval", DURATION),
        "Delay": Field("delay", DURATION),
        "DelayFunction": Field("delay_function", ATTR),
        "MaxDelay": Field("max_delay", DURATION),
        "Unlimited": Field("unlimited", ATTR),
    },
    "Task": {
        "Name": Field("task", LABEL),
        "Driver": Field("driver", ATTR),
        "User": Field("user", ATTR),
        "Leader": Field("leader", ATTR),
        "KillTimeout": Field("kill_timeout", DURATION),
        "KillSignal": Field("kill_signal", ATTR),
        "Config": Field("config", CONFIG),
        "Env": Field("env", MAP),
        "Meta": Field("meta", MAP),
        "Constraints": Field("constraint", BLOCKS, "Constraint"),
        "Resources": Field("resources", BLOCK, "Resources"),
        "VolumeMounts": Field("volume_mount", BLOCKS, "VolumeMount"),
        "Templates": Field("template", BLOCKS, "Template"),
        "Vault": Field("vault", BLOCK, "Vault"),
    },
    "VolumeMount": {
        "Volume": Field("volume", ATTR),
        "Destination": Field("destination", ATTR),
        "ReadOnly": Field("read_only", ATTR),
        "PropagationMode": Field("propagation_mode", ATTR),
        "SELinuxLabel": Field("selinux_label", ATTR),
    },
    "Resources": {
        "CPU": Field("cpu", ATTR),
        "Cores": Field("cores", ATTR),
        "MemoryMB": Field("memory", ATTR),
        "MemoryMaxMB": Field("memory_max", ATTR),
        "Devices": Field("device", BLOCKS, "RequestedDevice"),
    },
    "RequestedDevice": {
        "Name": Field("device", LABEL),
        "Count": Field("count", ATTR),
    },
    "Template": {
        "SourcePath": Field("source", ATTR),
        "DestPath": Field("destination", ATTR),
        "Perms": Field("perms", ATTR),
        "Uid": Field("uid", ATTR),
        "Gid": Field("gid", ATTR),
        "ChangeMode": Field("change_mode", ATTR),
        "ChangeSignal": Field("change_signal", ATTR),
        "ChangeScript": Field("change_script", BLOCK, "ChangeScript"),
        "Splay": Field("splay", DURATION),
        "Envvars": Field("env", ATTR),
        "LeftDelim": Field("left_delimiter", ATTR),
        "RightDelim": Field("right_delimiter", ATTR),
        "ErrMissingKey": Field("error_on_missing_key", ATTR),
        "EmbeddedTmpl": Field("data", ATTR),
    },
    "ChangeScript": {
        "Command": Field("command", ATTR),
        "Args": Field("args", LIST),
        "Timeout": Field("timeout", DURATION),
        "FailOnError": Field("fail_on_error", ATTR),
        "RunOnFirstRender": Field("run_on_first_render", ATTR),
    },
    "Vault": {
        "Role": Field("role", ATTR),
        "Policies": Field("policies", LIST),
        "Namespace": Field("namespace", ATTR),
        "Cluster": Field("cluster", ATTR),
        "Env": Field("env", ATTR),
        "DisableFile": Field("disable_file", ATTR),
        "ChangeMode": Field("change_mode", ATTR),
        "ChangeSignal": Field("change_signal", ATTR),
    },
}

#: Driver config lists of maps that are written as repeated blocks under another name (none today: the
#: job's driver config has no list of maps; mounts are host volumes, not the docker driver's ``mount``).
CONFIG_BLOCK_NAMES: t.Dict[str, str] = {}
