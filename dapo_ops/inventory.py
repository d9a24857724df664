"""Read an Ansible inventory the way Ansible does (`ansible-inventory --list`) into typed hosts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dapo_ops.errors import InventoryError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.paths import SIM_INVENTORY_DIR

DEFAULT_GROUP = "npu_nodes"
NPUS_VAR = "npus_per_node"


def host_npus(host: HostSpec) -> int:
    """The host's `npus_per_node`, parsed once, with the host and variable named when it is missing or wrong."""
    value = host.vars.get(NPUS_VAR)
    if value is None or value == "":
        raise InventoryError(f"{host.name} has no {NPUS_VAR} in the inventory (8 on an Atlas 800T A2, 16 on a "
                             "Box16)")
    if isinstance(value, bool):
        raise InventoryError(f"{host.name}: {NPUS_VAR} is {value!r}, not a whole number")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InventoryError(f"{host.name}: {NPUS_VAR} is {value!r}, not a whole number") from None
    if number <= 0:
        raise InventoryError(f"{host.name}: {NPUS_VAR} is {number}; it must be positive")
    return number


@dataclass(frozen=True)
class Inventory:
    source: Path
    hosts: tuple[HostSpec, ...]

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def limit(self, names: list[str]) -> Inventory:
        unknown = [n for n in names if n not in self.names()]
        if unknown:
            raise InventoryError(f"not in the inventory: {', '.join(unknown)} (hosts: {', '.join(self.names())})")
        return Inventory(self.source, tuple(h for h in self.hosts if h.name in names))


def _ansible_inventory_command() -> list[str]:
    candidate = Path(sys.executable).with_name("ansible-inventory")
    if candidate.exists():
        return [str(candidate)]
    found = shutil.which("ansible-inventory")
    if not found:
        raise InventoryError("ansible-inventory is not installed (pip install dapo-ops installs ansible-core)")
    return [found]


def load_raw(source: Path) -> dict:
    if not source.exists():
        hint = " (run `dapo-ops sim up` first)" if source.resolve() == SIM_INVENTORY_DIR.resolve() else ""
        raise InventoryError(f"inventory {source} does not exist{hint}")
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOCALHOST_WARNING="False")
    result = subprocess.run([*_ansible_inventory_command(), "-i", str(source), "--list"], capture_output=True,
                            text=True, env=env, timeout=120)
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        raise InventoryError(f"inventory {source} is not usable: {lines[-1] if lines else 'ansible-inventory failed'}")
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise InventoryError(f"inventory {source}: ansible-inventory printed no JSON") from None


def parse_inventory(raw: dict, source: Path, group: str = DEFAULT_GROUP) -> Inventory:
    """Hosts of `group` from `ansible-inventory --list` JSON (pure)."""
    hostvars = raw.get("_meta", {}).get("hostvars", {})
    names = _group_hosts(raw, group)
    if not names:
        hint = " (run `dapo-ops sim up` first)" if Path(source).resolve() == SIM_INVENTORY_DIR.resolve() else ""
        raise InventoryError(f"inventory {source} has no hosts in group {group!r}{hint}")
    hosts = []
    for name in names:
        v = hostvars.get(name, {})
        address = v.get("ansible_host", name)
        known = os.path.expanduser(v.get("dapo_known_hosts") or "~/.ssh/known_hosts")
        key = v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file")
        try:
            port = int(v.get("ansible_port", v.get("ansible_ssh_port", 22)))
        except (TypeError, ValueError):
            raise InventoryError(f"inventory {source}: {name} has a non-numeric ansible_port") from None
        hosts.append(HostSpec(
            name=name, address=str(address), known_hosts=Path(known),
            user=str(v.get("ansible_user", v.get("ansible_ssh_user", "root"))), port=port,
            key_file=Path(os.path.expanduser(key)) if key else None,
            connect_timeout=float(v.get("dapo_ssh_connect_timeout", 10)), vars=v))
    return Inventory(source, tuple(hosts))


def _group_hosts(raw: dict, group: str) -> list[str]:
    seen: list[str] = []

    def walk(name: str) -> None:
        node = raw.get(name, {})
        for host in node.get("hosts", []):
            if host not in seen:
                seen.append(host)
        for child in node.get("children", []):
            walk(child)

    walk(group)
    return seen


def load_inventory(source: Path | str | None = None, group: str = DEFAULT_GROUP) -> Inventory:
    path = Path(source) if source else SIM_INVENTORY_DIR
    return parse_inventory(load_raw(path), path, group)
