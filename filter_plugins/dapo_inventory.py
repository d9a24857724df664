"""The validate_inventory role's filter: dapo_ops.inventory_checks on the play's hostvars (on the controller)."""

from __future__ import annotations

from dapo_ops.inventory_checks import CHECKED_VARS, fleet_problems


def inventory_problems(hostvars, hosts) -> dict:
    """{host: [problem, ...]} for the hosts whose inventory variables are wrong."""
    hosts = list(hosts)
    found = {host: {name: hostvars[host][name] for name in CHECKED_VARS if name in hostvars[host]} for host in hosts}
    names = {host: list(hostvars[host]) for host in hosts}   # names only: nothing else is templated
    return fleet_problems(found, hosts, names)


class FilterModule:
    def filters(self):
        return {"dapo_inventory_problems": inventory_problems}
