"""The address each node's HCCL NIC carries: what HCCL_IF_IP and Ray's --node-ip-address must be.

Real Atlas servers are usually managed over one network (the address Ansible and SSH use, `ansible_host`) and
train over another (the NIC named by `HCCL_IFNAME`, which HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME also name).
HCCL binds HCCL_IF_IP, and Ray's node IP is what its workers and collective groups connect to, so both must be that
NIC's address: the inventory may give it (`HCCL_IP`), else it is read on the node.
"""

from __future__ import annotations

import ipaddress
import re
import shlex

from dapo_ops.errors import DapoError, InventoryError
from dapo_ops.fleet.ssh import HostSpec, QUICK, fan_out, run_on
from dapo_ops.model.variables import HCCL_IFNAME, HCCL_IP

NIC_VAR = HCCL_IFNAME.name
IP_VAR = HCCL_IP.name
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_INET = re.compile(r"\binet (\d{1,3}(?:\.\d{1,3}){3})/\d{1,2}\b")


def hccl_nic(host: HostSpec) -> str:
    nic = host.vars.get(NIC_VAR)
    if not nic:
        raise InventoryError(f"{host.name}: no {NIC_VAR} in the inventory (the NIC for HCCL/GLOO/TP traffic)")
    if not _IFNAME.match(str(nic)):
        raise InventoryError(f"{host.name}: {NIC_VAR} {nic!r} is not an interface name")
    return str(nic)


def inventory_address(host: HostSpec) -> str | None:
    """`HCCL_IP` when the inventory sets it (validated), else None."""
    value = host.vars.get(IP_VAR)
    if value in (None, ""):
        return None
    try:
        return str(ipaddress.IPv4Address(str(value).strip()))
    except ValueError:
        raise InventoryError(f"{host.name}: {IP_VAR} {value!r} is not an IPv4 address") from None


def parse_ipv4(text: str) -> list[str]:
    """`ip -4 -o addr show dev NIC` output -> its IPv4 addresses, primary first."""
    return _INET.findall(text)


def address_command(nic: str) -> str:
    return f"ip -4 -o addr show dev {shlex.quote(nic)}"


def read_addresses(hosts: list[HostSpec], timeout: float = QUICK) -> dict[str, str]:
    """Host name -> the IPv4 address of its HCCL NIC: the inventory's `HCCL_IP`, else read on the node over
    SSH (host keys verified). A node that cannot be asked fails with its name; a NIC without an address, or an
    inventory address the NIC does not carry, is an inventory mistake."""
    def one(host: HostSpec) -> tuple[str, str | None, str | None]:
        nic = hccl_nic(host)
        given = inventory_address(host)
        if given is not None:
            return host.name, given, None
        result = run_on(host, address_command(nic), timeout=timeout)
        if result.failure is not None:
            return host.name, None, f"{host.name}: cannot read {nic}'s address: {result.error}"
        found = parse_ipv4(result.stdout)
        if result.exit_code != 0 or not found:
            reason = (result.stderr.strip().splitlines() or ["no such interface"])[-1] if result.exit_code else \
                "it has no IPv4 address"
            raise InventoryError(f"{host.name}: {NIC_VAR} {nic}: {reason} (name the NIC HCCL uses, or set {IP_VAR})")
        return host.name, found[0], None

    results = list(fan_out(hosts, one).results.values())
    unreachable = [error for _, _, error in results if error]
    if unreachable:
        raise DapoError("; ".join(unreachable))
    return {name: address for name, address, _ in results if address}
