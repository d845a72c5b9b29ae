# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Attributes shared by this collection's modules (as community.docker's attributes fragment)."""

    # Every module: runs on POSIX controllers/targets.
    DOCUMENTATION = r"""
options: {}
attributes:
  platform:
    platforms: posix
"""

    # Modules of the action group backendai.cluster.nomad (meta/runtime.yml).
    ACTIONGROUP_NOMAD = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/backendai.cluster.nomad) in C(module_defaults) to set the connection options once.
    support: full
    membership:
      - backendai.cluster.nomad
"""
