# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The local backend's options; paired one-to-one with ``_ansible.args.local_runtime_argument_spec``."""

    DOCUMENTATION = r"""
options:
  state_dir:
    description:
      - Directory where the local backend keeps the state, keys and logs of its sessions (one subdirectory per session).
      - Only used by the local backend.
    type: path
    default: ~/.local/state/backendai-cluster/sessions
  mount_roots:
    description:
      - The only host directories the local backend mounts from. Every C(spec.mounts[].source) must lie under one of them,
        after symlinks are resolved; anything else is refused before a session is made.
      - Sources that hold the session network's key, code or state are refused whatever the roots (see
        C(spec.mounts[].source)), and so are the local backend's own directories (O(state_dir), the local agents' state).
      - Only used by the local backend when it creates a session.
    type: list
    elements: path
    default: [/srv, /data, /mnt]
"""
