"""Every inventory variable dapo-ops and its roles read, declared once: name, type, default and a one-line doc.

Python code reads a variable through its constant here (`NPUS_PER_NODE.name`), never by spelling the name;
the roles and templates spell it where Ansible needs it. docs/inventory-variables.md is generated from these
declarations (`python -m dapo_ops.model.variables > docs/inventory-variables.md`), and a test keeps both true.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str        # the value's type as the inventory writes it
    default: str     # what applies when it is not set ("required": nothing does)
    doc: str
    readers: str     # who reads it: dapo-ops commands and roles
    group: str

    def __str__(self) -> str:
        return self.name


VARIABLES: dict[str, Variable] = {}


def _declare(group: str, name: str, kind: str, default: str, doc: str, readers: str) -> Variable:
    variable = Variable(name, kind, default, doc, readers, group)
    VARIABLES[name] = variable
    return variable


NODES, ARTIFACTS, OS_PACKAGES, PYTHON, NETWORK, PREFLIGHT, LAUNCH = (
    "Nodes and SSH", "Vendor artifacts", "OS packages", "The Python stack", "HCCL network", "Preflight", "Launch")

SSH_CONNECT_TIMEOUT = _declare(NODES, "dapo_ssh_connect_timeout", "seconds", "10",
                               "How long dapo-ops' own SSH connections wait to connect.",
                               "every dapo-ops command that connects")
NPUS_PER_NODE = _declare(NODES, "dapo_npus_per_node", "int (1-16)", "required",
                         "NPUs on the node: 8 on an Atlas 800T A2, 16 on an Atlas 200T A2 Box16.",
                         "every command; preflight, ascend_hdk, hccl_network, verify")
REBOOT_BATCH_SIZE = _declare(NODES, "dapo_reboot_batch_size", "int (>= 1)", "1",
                             "How many nodes the HDK layer reboots at the same time.", "ascend_hdk; validate")
REBOOT_COMMAND = _declare(NODES, "dapo_reboot_command", "shell command", "the reboot module's own",
                          "The command ansible.builtin.reboot reboots the node with.", "ascend_hdk")
BOOT_TIME_COMMAND = _declare(NODES, "dapo_boot_time_command", "shell command", "the reboot module's own",
                             "The command ansible.builtin.reboot reads the boot time with, to see the reboot.",
                             "ascend_hdk")

ARTIFACT_URL = _declare(ARTIFACTS, "dapo_artifact_url", "URL", "none",
                        "An HTTP(S) mirror holding the vendor installers under their vendor file names.",
                        "artifact; validate")
ARTIFACT_DIR = _declare(ARTIFACTS, "dapo_artifact_dir", "path on the controller", "none",
                        "Or: a directory on the controller holding them, copied to the nodes.",
                        "artifact; validate")
ARTIFACT_DIGEST_FILE = _declare(ARTIFACTS, "dapo_artifact_digest_file", "absolute path on the controller", "none",
                                "The installers' sha256, in sha256sum's format, where the stack manifest has none: "
                                "`dapo-ops stack artifacts DIR` checks the files and writes it; a file with a digest "
                                "from neither is never installed.", "artifact; validate")

OS_PACKAGES_SOURCE = _declare(OS_PACKAGES, "dapo_os_packages_source", "site | local | none", "site",
                              "Where the OS packages the layers need and a node lacks come from: the node's own "
                              "repositories, the directory below, or nowhere (preflight then stops such a node).",
                              "os_packages, preflight; validate")
OS_PACKAGES_DIR = _declare(OS_PACKAGES, "dapo_os_packages_dir", "absolute path on the controller", "none",
                           "For `local`: a flat apt repository (.deb files and Packages) or a yum repository "
                           "(.rpm files and repodata/), copied to the nodes (docs/os-packages.md).",
                           "os_packages; validate")

PIP_INDEX_URL = _declare(PYTHON, "dapo_pip_index_url", "URL", "PyPI",
                         "The package index the nodes' pip uses (an air-gapped site's mirror).",
                         "python_env, vllm, verl; stack wheelhouse")
PIP_EXTRA_INDEX_URL = _declare(PYTHON, "dapo_pip_extra_index_url", "URL", "none",
                               "An extra index, e.g. Huawei's Ascend wheels.", "python_env")
PIP_TRUSTED_HOST = _declare(PYTHON, "dapo_pip_trusted_host", "host", "none",
                            "A plain-HTTP mirror host pip may trust (only when the inventory says so).", "python_env")
CONDA_CHANNEL = _declare(PYTHON, "dapo_conda_channel", "URL", "none (offline, from the installer's cache)",
                         "A conda channel mirror to create the environment from; it must serve the installer's "
                         "Python, file for file.", "python_env")
STACK_LOCK = _declare(PYTHON, "dapo_stack_lock", "path on the controller", "stack/lock's file for the platform",
                      "The stack lock to install from instead of the manifest's lock in force.",
                      "python_env; audit")
PIP_COMPILE = _declare(PYTHON, "dapo_pip_compile", "bool", "true",
                       "Byte-compile what pip installs; false leaves it to the first import.", "stack roles")
GIT_BASE_URL = _declare(PYTHON, "dapo_git_base_url", "URL", "https://github.com",
                        "The git server holding <org>/<repo>.git for the vLLM, vllm-ascend and verl sources.",
                        "vllm, verl")
GIT_BUNDLES = _declare(PYTHON, "dapo_git_bundles", "bool", "false",
                       "Take the three sources as git bundles from the artifact source (`<repo>-<tag>.bundle`, "
                       "`git bundle create` of the pinned tag), checked by commit as a clone is: no git server.",
                       "vllm, verl")
GIT_DEPTH = _declare(PYTHON, "dapo_git_depth", "int (0 = full history)", "1",
                     "Clone depth of the source checkouts from the git server (a plain-HTTP git server needs 0).",
                     "vllm, verl")
SOURCE_COMMITS = _declare(PYTHON, "dapo_source_commits", "mapping source -> commit", "the manifest's",
                          "Overrides of the pinned source commits, warned about at every run.", "vllm, verl")
IMPORT_STANDINS = _declare(PYTHON, "dapo_import_standins", "list of names", "[]",
                           "Distributions that are stand-ins on this fleet: the import sweep does not import them.",
                           "verify; validate")

HCCL_IFNAME = _declare(NETWORK, "dapo_hccl_ifname", "NIC name", "required for launch",
                       "The host NIC HCCL, GLOO and TP use between nodes.", "launch, render, validate; preflight")
HCCL_IP = _declare(NETWORK, "dapo_hccl_ip", "IPv4 address", "read from the NIC",
                   "That NIC's address, when the controller must know it before the launch (render).",
                   "launch, render, validate")
DEVICE_IPS = _declare(NETWORK, "dapo_device_ips", "list of IPv4", "none (the NPU NICs are left as they are)",
                      "One NPU NIC address per NPU, in NPU-id order.", "hccl_network; validate")
DEVICE_NETMASK = _declare(NETWORK, "dapo_device_netmask", "netmask", "255.255.255.0",
                          "The netmask of the NPU NIC addresses.", "hccl_network; validate")
DEVICE_GATEWAY = _declare(NETWORK, "dapo_device_gateway", "IPv4 address", "left as it is",
                          "The NPU NICs' gateway, needed when NPUs sit in different subnets.",
                          "hccl_network; validate")
DEVICE_NETDETECT = _declare(NETWORK, "dapo_device_netdetect", "IPv4 address", "the gateway",
                            "The address the NPU NICs' link detection pings.", "hccl_network; validate")
NPU_TLS = _declare(NETWORK, "dapo_npu_tls", "on | off", "left as it is",
                   "Every NPU NIC's TLS switch (mixed switches hang HCCL's link set-up).", "hccl_network; audit")

PREFLIGHT_JOB = _declare(PREFLIGHT, "dapo_preflight_job", "path on the controller", "jobs/qwen3-30b-a3b-dapo.yaml",
                         "The job whose host-memory estimate preflight checks the nodes against.", "preflight")
RAY_PORTS = _declare(PREFLIGHT, "dapo_ray_ports", "mapping port name -> port or range", "Ray's pinned ports",
                     "Ray's ports on the nodes (the launch pins them; preflight and the firewall check them).",
                     "launch, render, validate; preflight")
HCCL_PORTS = _declare(PREFLIGHT, "dapo_hccl_ports", "mapping name -> port or range", "HCCL's host ports",
                      "HCCL's host ports the firewall check expects open.", "preflight")
PROVISION_DURING_RUN = _declare(PREFLIGHT, "dapo_provision_during_run", "run id | any", "none",
                                "Provision the node although it holds this run's lock (or, `any`, has processes on "
                                "its NPUs); without it site.yml refuses a node a run is using.", "preflight")
HDK_DOWNGRADE = _declare(PREFLIGHT, "dapo_hdk_downgrade", "list of driver, firmware", "[]",
                         "Install the pinned driver or firmware although the node has a newer one; without it "
                         "site.yml refuses to go back.", "ascend_hdk")

RAY_FIREWALL = _declare(LAUNCH, "dapo_ray_firewall", "bool", "true",
                        "The run's nftables table keeps Ray's ports to the run's nodes.", "launch, render")
RUN_FENCE_NIC = _declare(LAUNCH, "dapo_run_fence_nic", "bool", "true",
                         "The table also drops new TCP on the HCCL NIC from hosts outside the run (SSH kept).",
                         "launch, render")
RAY_TLS = _declare(LAUNCH, "dapo_ray_tls", "bool", "false",
                   "Ray's gRPC over mutual TLS with a CA and certificates made for the run.", "launch, render")
LAUNCH_TIMEOUTS = _declare(LAUNCH, "dapo_launch_timeouts", "mapping step -> seconds",
                           "audit 120, stop 60, head 120, workers 60, cluster 90, submit 120",
                           "How long each launch step may take; `stop` also bounds every teardown.",
                           "launch, stop, watch; validate")
REHEARSAL_BACKEND = _declare(LAUNCH, "dapo_rehearsal_backend", "hccl | gloo", "hccl",
                             "The collectives the launch rehearsal runs (gloo: a fleet without torch_npu).",
                             "launch; validate")


PREFIX = "dapo_"   # every inventory-facing knob of dapo-ops and its roles
# names an earlier dapo-ops read, and what replaced them
RETIRED = {"dapo_artifact_digests": f"{ARTIFACT_DIGEST_FILE.name}, a file of sha256sum lines that `dapo-ops stack "
                                    "artifacts DIR` writes",
           # one known_hosts setting, Ansible's, which both read (dapo_ops/fleet/ssh_config.py)
           "dapo_known_hosts": "`-o UserKnownHostsFile=PATH` in ansible_ssh_common_args (or the ssh config's "
                               "UserKnownHostsFile), which Ansible and dapo-ops both read"}


def unknown_variable(name: str) -> str | None:
    """For a dapo_* name no declaration here knows (a typo Ansible and dapo-ops would ignore): the problem, naming
    the closest known name; None for a known name or one outside the dapo_ prefix."""
    if not name.startswith(PREFIX) or name in VARIABLES:
        return None
    if name in RETIRED:
        return f"{name} is replaced by {RETIRED[name]}"
    close = difflib.get_close_matches(name, list(VARIABLES), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "docs/inventory-variables.md lists them"
    return f"{name} is not a dapo-ops inventory variable ({hint})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")   # `hccl | gloo` inside a table cell


def markdown() -> str:
    """docs/inventory-variables.md, generated from the declarations."""
    lines = ["# Inventory variables", "",
             "Every variable dapo-ops and its roles read from an inventory (generated from "
             "`dapo_ops/model/variables.py`: `python -m dapo_ops.model.variables > docs/inventory-variables.md`). "
             "`dapo-ops validate` and the `validate_inventory` play check them before anything runs; a `dapo_` name that is "
             "not one of these is refused, naming the closest one.", ""]
    for group in (NODES, ARTIFACTS, OS_PACKAGES, PYTHON, NETWORK, PREFLIGHT, LAUNCH):
        lines += [f"## {group}", "", "| variable | type | default | what it does | read by |", "|---|---|---|---|---|"]
        lines += [f"| `{v.name}` | {_cell(v.kind)} | {_cell(v.default)} | {_cell(v.doc)} | {_cell(v.readers)} |"
                  for v in VARIABLES.values() if v.group == group]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
