#!/usr/bin/python
"""Read-only facts about an Ascend training node, gathered in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dapo_node_facts
short_description: Read-only facts about an Ascend NPU node (PCI NPUs, tools, run user, version files, disk)
description:
  - Counts NPU PCI functions with C(lspci -n -d VENDOR:DEVICE), looks for the tools the driver build needs,
    the HwHiAiUser user and group, kernel headers, free disk, and reads the driver, firmware and CANN version files.
  - Changes nothing; supports check mode.
options:
  install_path:
    description: Ascend install path.
    type: path
    default: /usr/local/Ascend
  pci_id:
    description: NPU PCI vendor:device.
    type: str
    default: "19e5:d802"
  tools:
    description: Commands that must be on PATH.
    type: list
    elements: str
    default: []
  header_paths:
    description: Candidate kernel header directories; one must exist.
    type: list
    elements: path
    default: []
  version_files:
    description: Version files to read, name -> path relative to install_path (C(key=value) or C(key : value) lines).
    type: dict
    default: {}
  run_user:
    description: The driver's run user (and group).
    type: str
    default: HwHiAiUser
author: dapo-ops
"""

RETURN = r"""
npu_pci_count: {description: NPU PCI functions found, type: int, returned: always}
missing_tools: {description: required tools not on PATH, type: list, returned: always}
"""

import grp
import os
import pwd
import shutil

from ansible.module_utils.basic import AnsibleModule


def read_kv(path):
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    info = {}
    for line in lines:
        sep = "=" if "=" in line else ":"
        if sep in line:
            key, value = line.split(sep, 1)
            info[key.strip()] = value.strip()
    return info


def main():
    module = AnsibleModule(
        argument_spec={
            "install_path": {"type": "path", "default": "/usr/local/Ascend"},
            "pci_id": {"type": "str", "default": "19e5:d802"},
            "tools": {"type": "list", "elements": "str", "default": []},
            "header_paths": {"type": "list", "elements": "path", "default": []},
            "version_files": {"type": "dict", "default": {}},
            "run_user": {"type": "str", "default": "HwHiAiUser"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["install_path"]
    lspci = module.get_bin_path("lspci")
    pci_count = None
    pci_error = None
    if lspci:
        rc, out, err = module.run_command([lspci, "-n", "-d", p["pci_id"]])
        if rc == 0:
            pci_count = len([line for line in out.splitlines() if line.strip()])
        else:
            pci_error = (err or out).strip()
    else:
        pci_error = "lspci not found (install pciutils)"
    try:
        pwd.getpwnam(p["run_user"])
        user = True
    except KeyError:
        user = False
    try:
        grp.getgrnam(p["run_user"])
        group = True
    except KeyError:
        group = False
    stat = os.statvfs(root if os.path.isdir(root) else os.path.dirname(root.rstrip("/")) or "/")
    facts = {
        "npu_pci_count": pci_count,
        "npu_pci_error": pci_error,
        "missing_tools": [t for t in p["tools"] if shutil.which(t) is None],
        "kernel_headers": next((h for h in p["header_paths"] if os.path.isdir(h)), None),
        "run_user_present": user,
        "run_group_present": group,
        "free_gib": round(stat.f_bavail * stat.f_frsize / 2**30, 1),
        "versions": {name: read_kv(os.path.join(root, rel)) for name, rel in p["version_files"].items()},
        "driver_tools_complete": os.path.exists(os.path.join(root, "driver", "tools", "upgrade-tool")),
        "npu_smi": module.get_bin_path("npu-smi"),
    }
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
