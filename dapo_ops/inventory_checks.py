"""What can be checked from the inventory alone, before any node is touched (pure). The validate_inventory role
runs it first in site.yml (kubespray's validate_inventory does the same), through the dapo_inventory_problems
filter, so Ansible and the CLI apply one set of rules."""

from __future__ import annotations

import os

from dapo_ops.ascend.hccn import plan_problems
from dapo_ops.errors import InventoryError, ManifestError, UsageError
from dapo_ops.fleet.nic import hccl_nic, inventory_address
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.inventory import RENAMED_VARS, Host, host_npus
from dapo_ops.launch.rehearsal import backend_for
from dapo_ops.stack.artifacts import digest_problems, read_digest_file
from dapo_ops.stack.imports import STANDINS_VARIABLE, import_standins
from dapo_ops.model.os_packages import SOURCES
from dapo_ops.model.timeouts import step_timeouts
from dapo_ops.model.values import ansible_bool
from dapo_ops.manifest import load_manifest
from dapo_ops.model.variables import (
    ARTIFACT_DIGEST_FILE, ARTIFACT_DIR, ARTIFACT_URL, DEVICE_GATEWAY, DEVICE_IPS, DEVICE_NETDETECT, DEVICE_NETMASK,
    HCCL_IFNAME, HCCL_IP, HDK_DOWNGRADE, LAUNCH_TIMEOUTS, NPUS_PER_NODE, OS_PACKAGES_DIR, OS_PACKAGES_SOURCE,
    PROVISION_DURING_RUN, RAY_FIREWALL, RAY_PORTS,
    RAY_TLS, REBOOT_BATCH_SIZE, REHEARSAL_BACKEND, RUN_FENCE_NIC, unknown_variable)
from dapo_ops.ray_ports import ray_ports

ARTIFACT_SOURCES = (ARTIFACT_URL.name, ARTIFACT_DIR.name)
# every variable the checks read (Ansible hands over only these: templating all hostvars could fail elsewhere)
CHECKED_VARS = ("ansible_host", NPUS_PER_NODE.name, *RENAMED_VARS, *ARTIFACT_SOURCES, ARTIFACT_DIGEST_FILE.name,
                HCCL_IFNAME.name,
                HCCL_IP.name, REHEARSAL_BACKEND.name, REBOOT_BATCH_SIZE.name, "hccl_network_enabled",
                DEVICE_IPS.name, DEVICE_NETMASK.name, DEVICE_GATEWAY.name, DEVICE_NETDETECT.name,
                STANDINS_VARIABLE, RAY_PORTS.name, LAUNCH_TIMEOUTS.name, RAY_FIREWALL.name, RUN_FENCE_NIC.name,
                RAY_TLS.name, "stack_manifest", HDK_DOWNGRADE.name, PROVISION_DURING_RUN.name,
                OS_PACKAGES_SOURCE.name, OS_PACKAGES_DIR.name)


def _named_error(check, *args) -> list[str]:
    try:
        check(*args)
    except (InventoryError, UsageError) as exc:
        return [str(exc)]
    return []


def _artifact_source(hostvars: dict) -> list[str]:
    given = [name for name in ARTIFACT_SOURCES if hostvars.get(name)]
    if len(given) == 1:
        return []
    return [f"set exactly one of {' or '.join(ARTIFACT_SOURCES)} (an HTTP mirror, or a directory on the controller)"
            + ("; both are set" if given else "")]


def _artifact_digests(hostvars: dict) -> list[str]:
    """Every installer the manifest pins has a sha256: the manifest's, else the one the site's digest file records
    (and the two agree where both have one)."""
    digest_file = hostvars.get(ARTIFACT_DIGEST_FILE.name) or ""
    if digest_file and not (isinstance(digest_file, str) and os.path.isabs(os.path.expanduser(digest_file))):
        return [f"{ARTIFACT_DIGEST_FILE} must be an absolute path on the controller, got {digest_file!r}"]
    try:  # a site's own copy of the manifest (the stack role's stack_manifest)
        manifest = load_manifest(hostvars.get("stack_manifest"))
    except ManifestError as exc:
        return [str(exc)]
    try:
        recorded = read_digest_file(os.path.expanduser(digest_file)) if digest_file else {}
    except UsageError as exc:
        return [f"{ARTIFACT_DIGEST_FILE}: {exc}"]
    return digest_problems(manifest, recorded, f"{ARTIFACT_DIGEST_FILE} {digest_file}" if digest_file
                           else f"no {ARTIFACT_DIGEST_FILE}")


def _provisioning_switches(hostvars: dict) -> list[str]:
    problems = []
    downgrade = hostvars.get(HDK_DOWNGRADE.name)
    if downgrade is not None and (not isinstance(downgrade, list) or not set(downgrade) <= {"driver", "firmware"}):
        problems.append(f"{HDK_DOWNGRADE} must be a list of driver, firmware (got {downgrade!r})")
    during = hostvars.get(PROVISION_DURING_RUN.name)
    if during is not None and not (isinstance(during, str) and during.strip()):
        problems.append(f"{PROVISION_DURING_RUN} must be a run id or `any` (got {during!r})")
    return problems


def _os_packages(hostvars: dict) -> list[str]:
    source = hostvars.get(OS_PACKAGES_SOURCE.name, "site")
    if source not in SOURCES:
        return [f"{OS_PACKAGES_SOURCE} is {source!r}, not one of {', '.join(SOURCES)}"]
    directory = hostvars.get(OS_PACKAGES_DIR.name)
    if source != "local":
        return [f"{OS_PACKAGES_DIR} is set but {OS_PACKAGES_SOURCE} is {source} (set it to local)"] if directory else []
    if not (isinstance(directory, str) and os.path.isabs(os.path.expanduser(directory))):
        return [f"{OS_PACKAGES_SOURCE} local needs {OS_PACKAGES_DIR}, an absolute path on the controller "
                f"(got {directory!r})"]
    if not os.path.isdir(os.path.expanduser(directory)):
        return [f"{OS_PACKAGES_DIR} {directory} is not a directory on the controller"]
    return []


def _positive_int(hostvars: dict, name: str) -> list[str]:
    value = hostvars.get(name)
    if value is None:
        return []
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value)) <= 0:
        return [f"{name} is {value!r}, not a positive whole number"]
    return []


def _launch_problems(hostvars: dict) -> list[str]:
    """The launch's own variables: Ray's ports, the step timeouts and the firewall and TLS switches parse."""
    problems = _named_error(ray_ports, hostvars.get(RAY_PORTS.name))
    problems += _named_error(step_timeouts, hostvars.get(LAUNCH_TIMEOUTS.name))
    for switch, default in ((RAY_FIREWALL, True), (RUN_FENCE_NIC, True), (RAY_TLS, False)):
        problems += _named_error(ansible_bool, hostvars.get(switch.name), switch.name, default)
    return problems


def host_problems(name: str, hostvars: dict, provisioning: bool = True, names=None) -> list[str]:
    """Every problem of one host's variables, each naming the variable; the job commands (provisioning=False) leave
    out what only the playbook reads (the artifact source and digests, the reboot batch size). `names`: every
    variable name the host has, when hostvars holds only the checked ones (Ansible's filter)."""
    host = Host(name, str(hostvars.get("ansible_host", name)), known_hosts=None, vars=hostvars)  # type: ignore[arg-type]
    problems = [f"{old} is now called {new} (rename it in the inventory)" for old, new in RENAMED_VARS.items()
                if old in hostvars and new not in hostvars]
    problems += [p for p in map(unknown_variable, sorted(hostvars if names is None else names)) if p]
    if not problems:
        problems += _named_error(host_npus, host)
    problems += _named_error(hccl_nic, host) + _named_error(inventory_address, host)
    problems += _named_error(backend_for, hostvars) + _named_error(import_standins, hostvars)
    problems += _launch_problems(hostvars)
    if provisioning:
        problems += _artifact_source(hostvars) + _artifact_digests(hostvars)
        problems += _positive_int(hostvars, REBOOT_BATCH_SIZE.name) + _provisioning_switches(hostvars)
        problems += _os_packages(hostvars)
    return [p.removeprefix(f"{name}: ") for p in problems]  # the callers name the host once


def job_host_problems(hosts: list[HostSpec]) -> None:
    """Every problem of the hosts a job would use (the head first), all at once, as one InventoryError."""
    found = [f"{h.name}: {p}" for h in hosts for p in host_problems(h.name, h.vars, provisioning=False)]
    if found:
        raise InventoryError("; ".join(found))


def _device_plan(hostvars: dict) -> dict:
    """The hccl_network role's plan from the inventory (its defaults' names)."""
    return {"device_ips": hostvars.get(DEVICE_IPS.name) or [],
            "netmask": hostvars.get(DEVICE_NETMASK.name, "255.255.255.0"),
            "gateway": hostvars.get(DEVICE_GATEWAY.name, ""),
            "netdetect": hostvars.get(DEVICE_NETDETECT.name, hostvars.get(DEVICE_GATEWAY.name, "")),
            "npus": int(str(hostvars.get(NPUS_PER_NODE.name)).strip())}


def fleet_problems(hostvars_by_host: dict[str, dict], order: list[str],
                   names_by_host: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """host -> its problems (only hosts that have some): each host's own, then the NPU network plan of the hosts
    that configure it (hccl_network_enabled), checked across the fleet as the hccl_network role does."""
    problems = {host: host_problems(host, hostvars_by_host[host], names=(names_by_host or {}).get(host))
                for host in order}
    planned = [h for h in order if hostvars_by_host[h].get("hccl_network_enabled") in (True, "true", "True")
               and not problems[h]]
    if planned:
        plans = {h: _device_plan(hostvars_by_host[h]) for h in planned}
        for host, found in plan_problems(plans, planned).items():
            problems[host] += [f"RoCE plan: {p}" for p in found]  # as the hccl_network role words it
    return {host: found for host, found in problems.items() if found}
