"""What can be checked from the inventory alone, before any node is touched (pure). The validate_inventory role
runs it first in site.yml (kubespray's validate_inventory does the same), through the dapo_inventory_problems
filter, so Ansible and the CLI apply one set of rules."""

from __future__ import annotations

from dapo_ops.ascend.hccn import plan_problems
from dapo_ops.errors import InventoryError, UsageError
from dapo_ops.fleet.nic import hccl_nic, inventory_address
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.inventory import RENAMED_VARS, host_npus
from dapo_ops.launch.rehearsal import backend_for
from dapo_ops.stack.imports import STANDINS_VARIABLE, import_standins

ARTIFACT_SOURCES = ("dapo_artifact_url", "dapo_artifact_dir")
# every variable the checks read (Ansible hands over only these: templating all hostvars could fail elsewhere)
CHECKED_VARS = ("ansible_host", "dapo_npus_per_node", *RENAMED_VARS, *ARTIFACT_SOURCES, "dapo_hccl_ifname",
                "dapo_hccl_ip", "dapo_rehearsal_backend", "dapo_reboot_batch_size", "hccl_network_enabled",
                "dapo_device_ips", "dapo_device_netmask", "dapo_device_gateway", "dapo_device_netdetect",
                STANDINS_VARIABLE)


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


def _positive_int(hostvars: dict, name: str) -> list[str]:
    value = hostvars.get(name)
    if value is None:
        return []
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value)) <= 0:
        return [f"{name} is {value!r}, not a positive whole number"]
    return []


def host_problems(name: str, hostvars: dict, provisioning: bool = True) -> list[str]:
    """Every problem of one host's variables, each naming the variable; the job commands (provisioning=False) leave
    out what only the playbook reads (the artifact source, the reboot batch size)."""
    host = HostSpec(name, str(hostvars.get("ansible_host", name)), known_hosts=None, vars=hostvars)  # type: ignore[arg-type]
    problems = [f"{old} is now called {new} (rename it in the inventory)" for old, new in RENAMED_VARS.items()
                if old in hostvars and new not in hostvars]
    if not problems:
        problems += _named_error(host_npus, host)
    problems += _named_error(hccl_nic, host) + _named_error(inventory_address, host)
    problems += _named_error(backend_for, hostvars) + _named_error(import_standins, hostvars)
    if provisioning:
        problems += _artifact_source(hostvars) + _positive_int(hostvars, "dapo_reboot_batch_size")
    return [p.removeprefix(f"{name}: ") for p in problems]  # the callers name the host once


def job_host_problems(hosts: list[HostSpec]) -> None:
    """Every problem of the hosts a job would use (the head first), all at once, as one InventoryError."""
    found = [f"{h.name}: {p}" for h in hosts for p in host_problems(h.name, h.vars, provisioning=False)]
    if found:
        raise InventoryError("; ".join(found))


def _device_plan(hostvars: dict) -> dict:
    """The hccl_network role's plan from the inventory (its defaults' names)."""
    return {"device_ips": hostvars.get("dapo_device_ips") or [],
            "netmask": hostvars.get("dapo_device_netmask", "255.255.255.0"),
            "gateway": hostvars.get("dapo_device_gateway", ""),
            "netdetect": hostvars.get("dapo_device_netdetect", hostvars.get("dapo_device_gateway", "")),
            "npus": int(str(hostvars.get("dapo_npus_per_node")).strip())}


def fleet_problems(hostvars_by_host: dict[str, dict], order: list[str]) -> dict[str, list[str]]:
    """host -> its problems (only hosts that have some): each host's own, then the NPU network plan of the hosts
    that configure it (hccl_network_enabled), checked across the fleet as the hccl_network role does."""
    problems = {host: host_problems(host, hostvars_by_host[host]) for host in order}
    planned = [h for h in order if hostvars_by_host[h].get("hccl_network_enabled") in (True, "true", "True")
               and not problems[h]]
    if planned:
        plans = {h: _device_plan(hostvars_by_host[h]) for h in planned}
        for host, found in plan_problems(plans, planned).items():
            problems[host] += [f"RoCE plan: {p}" for p in found]  # as the hccl_network role words it
    return {host: found for host, found in problems.items() if found}
