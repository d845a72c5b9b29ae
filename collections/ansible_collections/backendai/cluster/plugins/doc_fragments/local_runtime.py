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
"""
