#!/usr/bin/python
"""Read-only facts about an Ascend training node, gathered in one round trip; parsing happens on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dapo_node_facts
short_description: Read-only raw facts about an Ascend NPU node in one round trip
description:
  - Counts NPU PCI functions with C(lspci -n -d VENDOR:DEVICE), looks for the tools the driver build needs,
    the run user and group, kernel headers and free disk, returns the raw text of the requested version files
    and the raw output of the requested read-only commands (parsed on the controller by the dapo_ops filters).
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
    description: Candidate kernel header directories ({kernel} = the running kernel); the first that exists is returned.
    type: list
    elements: path
    default: []
  version_files:
    description: Files to read, name -> path (relative paths are under install_path).
    type: dict
    default: {}
  commands:
    description: Read-only commands to run, name -> argv list. A command not on PATH gives rc 127.
    type: dict
    default: {}
  board_ids:
    description: NPU ids to query with C(npu-smi info -t board -i N); their outputs are returned as C(board<N>).
    type: list
    elements: int
    default: []
  hccn_ids:
    description: NPU ids to query with hccn_tool (-link, -net_health, -ip, -netdetect, -gateway, -tls); outputs
      C(link<N>), C(net_health<N>), C(ip<N>), C(netdetect<N>), C(gateway<N>), C(tls<N>).
    type: list
    elements: int
    default: []
  hccn_tool:
    description: Path of hccn_tool.
    type: path
    default: /usr/local/Ascend/driver/tools/hccn_tool
  run_user:
    description: The driver's run user (and group).
    type: str
    default: HwHiAiUser
  paths:
    description: Files to look for, name -> list of glob patterns; C(found_paths) holds the first match of each (or null).
    type: dict
    default: {}
author: dapo-ops
"""

RETURN = r"""
npu_pci_count: {description: NPU PCI functions found (null when lspci failed), type: int, returned: always}
missing_tools: {description: required tools not on PATH, type: list, returned: always}
files: {description: name -> file text (null when absent), type: dict, returned: always}
outputs: {description: name -> {rc, stdout, stderr}, type: dict, returned: always}
platform: {description: architecture, kernel, uid, distribution (first word of os-release NAME), os_like (ID and ID_LIKE
  words), type: dict, returned: always}
found_paths: {description: name -> first existing match of its patterns (null when none), type: dict, returned: always}
"""

import glob
import grp
import os
import pwd
import shutil

from ansible.module_utils.basic import AnsibleModule


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def exists_in(database, name):
    try:
        database(name)
        return True
    except KeyError:
        return False


def main():
    module = AnsibleModule(
        argument_spec={
            "install_path": {"type": "path", "default": "/usr/local/Ascend"},
            "pci_id": {"type": "str", "default": "19e5:d802"},
            "tools": {"type": "list", "elements": "str", "default": []},
            "header_paths": {"type": "list", "elements": "path", "default": []},
            "version_files": {"type": "dict", "default": {}},
            "commands": {"type": "dict", "default": {}},
            "board_ids": {"type": "list", "elements": "int", "default": []},
            "hccn_ids": {"type": "list", "elements": "int", "default": []},
            "hccn_tool": {"type": "path", "default": "/usr/local/Ascend/driver/tools/hccn_tool"},
            "run_user": {"type": "str", "default": "HwHiAiUser"},
            "paths": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["install_path"]
    pci_count, pci_error = None, None
    lspci = module.get_bin_path("lspci")
    if lspci:
        rc, out, err = module.run_command([lspci, "-n", "-d", p["pci_id"]])
        if rc == 0:
            pci_count = len([line for line in out.splitlines() if line.strip()])
        else:
            pci_error = (err or out).strip()
    else:
        pci_error = "lspci not found (install pciutils)"
    outputs = {}
    commands = dict(p["commands"])
    for npu in p["board_ids"]:
        commands["board%d" % npu] = ["npu-smi", "info", "-t", "board", "-i", str(npu)]
    for npu in p["hccn_ids"]:
        for query in ("link", "net_health", "ip", "netdetect", "gateway", "tls"):
            commands["%s%d" % (query, npu)] = [p["hccn_tool"], "-i", str(npu), "-" + query, "-g"]
    for name, argv in commands.items():
        if not argv or not module.get_bin_path(argv[0]):
            outputs[name] = {"rc": 127, "stdout": "", "stderr": "%s: command not found" % (argv[:1] or ["?"])[0]}
            continue
        rc, out, err = module.run_command([str(a) for a in argv])
        outputs[name] = {"rc": rc, "stdout": out, "stderr": err}
    os_release = {}
    for line in (read("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            os_release[key] = value.strip().strip('"')
    uname = os.uname()
    platform = {"architecture": uname.machine, "kernel": uname.release, "uid": os.geteuid(),
                "distribution": os_release.get("NAME", "unknown").split()[0],
                "distribution_version": os_release.get("VERSION_ID", ""),
                "os_like": (os_release.get("ID", "") + " " + os_release.get("ID_LIKE", "")).split()}
    probe = root
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    stat = os.statvfs(probe)
    module.exit_json(
        changed=False,
        npu_pci_count=pci_count,
        npu_pci_error=pci_error,
        missing_tools=[t for t in p["tools"] if shutil.which(t) is None],
        kernel_headers=next((h for h in (x.replace("{kernel}", uname.release) for x in p["header_paths"])
                             if os.path.isdir(h)), None),
        run_user_present=exists_in(pwd.getpwnam, p["run_user"]),
        run_group_present=exists_in(grp.getgrnam, p["run_user"]),
        free_gib=round(stat.f_bavail * stat.f_frsize / 2**30, 1),
        files={name: read(path if path.startswith("/") else os.path.join(root, path))
               for name, path in p["version_files"].items()},
        driver_tools_complete=os.path.exists(os.path.join(root, "driver", "tools", "upgrade-tool")),
        outputs=outputs,
        platform=platform,
        found_paths={name: next((m for pattern in (patterns or []) for m in sorted(glob.glob(str(pattern)))), None)
                     for name, patterns in p["paths"].items()},
    )


if __name__ == "__main__":
    main()
