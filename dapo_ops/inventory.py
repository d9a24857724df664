"""Read an Ansible inventory the way Ansible does (its inventory API, as `ansible-inventory --list`) into typed
hosts."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dapo_ops import inventory_cache
from dapo_ops.errors import InventoryError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.fleet.ssh_config import ARGS_VARS, BECOME_VARS, ssh_settings
from dapo_ops.layout import NodeLayout, layout_problems, node_layout
from dapo_ops.model.variables import NPUS_PER_NODE, REBOOT_BATCH_SIZE, SSH_CONNECT_TIMEOUT, unknown_variable

DEFAULT_GROUP = "npu_nodes"
NPUS_VAR = NPUS_PER_NODE.name
# inventory variables that were renamed (every inventory-facing knob is dapo_*): old name -> new name
RENAMED_VARS = {"npus_per_node": NPUS_VAR, "reboot_batch_size": REBOOT_BATCH_SIZE.name}


def host_npus(host: HostSpec) -> int:
    """The host's `NPUS_PER_NODE`, parsed once, with the host and variable named when it is missing or wrong."""
    value = host.vars.get(NPUS_VAR)
    if value is None or value == "":
        if RENAMED_VARS["npus_per_node"] == NPUS_VAR and "npus_per_node" in host.vars:
            raise InventoryError(f"{host.name}: npus_per_node is now called {NPUS_VAR} (rename it in the inventory)")
        raise InventoryError(f"{host.name}: no {NPUS_VAR} in the inventory (8 on an Atlas 800T A2, 16 on a "
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
class Host(HostSpec):
    """A host of the inventory: its SSH target, and its variables parsed on first use (an error names the host and
    the variable)."""

    @cached_property
    def npus(self) -> int:
        return host_npus(self)

    @cached_property
    def layout(self) -> NodeLayout:
        """Its stack_* paths (the role defaults where the inventory sets none)."""
        return node_layout(self.vars)


@dataclass(frozen=True)
class Inventory:
    source: Path
    hosts: tuple[Host, ...]

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def limit(self, names: list[str]) -> Inventory:
        unknown = [n for n in names if n not in self.names()]
        if unknown:
            raise InventoryError(f"not in the inventory: {', '.join(unknown)} (hosts: {', '.join(self.names())})")
        return Inventory(self.source, tuple(h for h in self.hosts if h.name in names))


class NoHosts(InventoryError):
    """The inventory does not exist or names no host of the group (a fleet not up, a path mistyped)."""


_plugins_ready = False
SCRIPTS_OPT_IN = "DAPO_OPS_INVENTORY_SCRIPTS"   # =1: executable inventory files run (dynamic inventories)
# The connection variables dapo-ops reads besides its own dapo_* (and the stack_* of layout.py)
CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_ssh_user", "ansible_port", "ansible_ssh_port",
                   "ansible_ssh_private_key_file", "ansible_private_key_file", *ARGS_VARS, *BECOME_VARS)
_TEMPLATE_MARKS = ("{{", "{%", "{#")


def load_raw(source: Path) -> dict:
    """What `ansible-inventory -i SOURCE --list` prints, read in-process with Ansible's own inventory API (its
    groups, hosts and flattened host variables), from a cache while no file of a static inventory changed."""
    if not source.exists():
        raise NoHosts(f"inventory {source} does not exist")
    scripts = os.environ.get(SCRIPTS_OPT_IN) == "1"
    if not scripts:
        executable = _executable_files(source)
        if executable:
            raise InventoryError(f"inventory file {executable[0]} is executable: Ansible would run it on the "
                                 "controller as an inventory script; dapo-ops reads YAML and INI inventories only "
                                 f"(chmod a-x it, or set {SCRIPTS_OPT_IN}=1 to run inventory scripts)")
    key = inventory_cache.cache_key(source)
    raw = inventory_cache.read(key) if key else None
    if raw is None:
        raw = _ansible_list(source)
        if key:
            inventory_cache.write(key, raw)
    return raw


def _executable_files(source: Path) -> list[Path]:
    """The executable regular files Ansible would read as inventory sources (group_vars/host_vars hold variables,
    read as YAML, and hidden files are skipped, as Ansible's inventory manager does)."""
    if source.is_file():
        return [source] if os.access(source, os.X_OK) else []
    found = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).parts
        if relative[0] in ("group_vars", "host_vars") or any(part.startswith(".") for part in relative):
            continue
        if path.is_file() and os.access(path, os.X_OK):
            found.append(path)
    return found


def _ansible_list(source: Path) -> dict:
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "False")
    from ansible.errors import AnsibleError

    said = io.StringIO()  # Ansible's warnings would break our one-line errors; the first parse failure is kept
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            raw = _parse_with_ansible(source)
    except AnsibleError as exc:
        raise InventoryError(f"inventory {source} is not usable: {_why(said.getvalue(), exc)}") from None
    # plain JSON types, as ansible-inventory prints them (Ansible tags its strings and numbers)
    return json.loads(json.dumps(raw, default=str))


def _why(said: str, exc: Exception) -> str:
    """The plugin's own reason (with file:line:col when Ansible gives it), else the exception's first line."""
    lines = said.splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"\[WARNING\]: Failed to parse inventory with '(yaml|auto|ini)' plugin: (.*)", line)
        if match:
            origins = [o.split("Origin: ", 1)[1] for o in lines[index:index + 12] if o.startswith("Origin: /")]
            return match.group(2).strip() + (f" ({origins[0]})" if origins else "")
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    return text[0] if text else type(exc).__name__


def _parse_with_ansible(source: Path) -> dict:
    from ansible import constants
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.plugins.vars import host_group_vars
    from ansible.vars.manager import VariableManager

    global _plugins_ready
    if not _plugins_ready:  # once per process: Ansible warns when its collection finder is set up twice
        init_plugin_loader()
        _plugins_ready = True
    # group_vars/host_vars listings are cached per process; a second read in one process must see new files
    host_group_vars.FOUND.clear()
    host_group_vars.NAK.clear()
    # YAML and INI only, as ansible.cfg says, whatever the environment enables; scripts only on the opt-in
    constants.INVENTORY_ENABLED = ["yaml", "ini"] + (["script"] if os.environ.get(SCRIPTS_OPT_IN) == "1" else [])
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(source)])
    variables = VariableManager(loader=loader, inventory=inventory)
    raw: dict = {group.name: {"hosts": [h.name for h in group.hosts],
                              "children": [c.name for c in group.child_groups]}
                 for group in inventory.groups.values()}
    hostvars = {}
    for host in inventory.get_hosts("all"):
        found = variables.get_vars(host=host, include_hostvars=False, stage="all")
        hostvars[host.name] = {k: v for k, v in found.items() if k not in constants.INTERNAL_STATIC_VARS}
    raw["_meta"] = {"hostvars": hostvars}
    return raw


# Host names become file and directory names (run records, rendered files, audit bundles): no path separators.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def parse_inventory(raw: dict, source: Path, group: str = DEFAULT_GROUP) -> Inventory:
    """Hosts of `group` from `ansible-inventory --list` JSON (pure)."""
    hostvars = raw.get("_meta", {}).get("hostvars", {})
    names = _group_hosts(raw, group)
    if not names:
        raise NoHosts(f"inventory {source} has no hosts in group {group!r}")
    hosts = []
    for name in names:
        v = hostvars.get(name, {})
        problems = ([] if HOST_NAME.fullmatch(name) and ".." not in name else
                    ["the host name is not a plain name (letters, digits, '.', '_', '-'; it names files)"])
        problems += layout_problems(v) + _template_problems(v)
        problems += [p for p in map(unknown_variable, sorted(v)) if p]
        if problems:
            raise InventoryError(f"inventory {source}: host {name!r}: {problems[0]}")
        try:
            ssh = ssh_settings(name, v)
        except InventoryError as exc:
            raise InventoryError(f"inventory {source}: {exc}") from None
        target = ssh.target
        try:
            timeout = float(v.get(SSH_CONNECT_TIMEOUT.name, 10))
        except (TypeError, ValueError):
            raise InventoryError(f"inventory {source}: {name} has a non-numeric {SSH_CONNECT_TIMEOUT.name}") from None
        hosts.append(Host(
            name=name, address=target.address, known_hosts=target.known_hosts, user=target.user, port=target.port,
            key_file=target.key_file, connect_timeout=timeout, vars=v, jumps=ssh.jumps, become_user=ssh.become_user))
    return Inventory(source, tuple(hosts))


def _template_problems(host_vars: dict) -> list[str]:
    """dapo_* and connection values are data: one holding a Jinja2 template (`{{ lookup('pipe', ...) }}` would run
    on the controller when Ansible renders it) is refused, whatever its depth in a list or mapping."""
    def templated(value) -> bool:
        if isinstance(value, str):
            return any(mark in value for mark in _TEMPLATE_MARKS)
        if isinstance(value, dict):
            return any(templated(k) or templated(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return any(templated(v) for v in value)
        return False
    return [f"{key} holds a template ({str(value)[:60]!r}): dapo-ops reads inventory values as data, and Ansible "
            "would evaluate it on the controller" for key, value in sorted(host_vars.items())
            if (key.startswith("dapo_") or key in CONNECTION_VARS) and templated(value)]


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


INVENTORY_ENV = "DAPO_OPS_INVENTORY"
NO_INVENTORY = ("no inventory: pass -i INVENTORY, or set DAPO_OPS_INVENTORY, or Ansible's own (ANSIBLE_INVENTORY, "
                "or `inventory` under [defaults] in ansible.cfg)")


def configured_inventory() -> Path | None:
    """The inventory when -i gives none: DAPO_OPS_INVENTORY, else the one Ansible is configured with (ANSIBLE_INVENTORY
    or ansible.cfg's, found as ansible-playbook finds it); None when neither is set."""
    if os.environ.get(INVENTORY_ENV):
        return Path(os.environ[INVENTORY_ENV])
    exported = os.environ.get("ANSIBLE_INVENTORY")
    if exported == "":
        return None
    if exported is not None and "," not in exported and "{{" not in exported:
        return Path(_ansible_path(exported))
    from ansible.config.manager import ConfigManager
    from ansible.errors import AnsibleError

    try:
        sources, origin = ConfigManager().get_config_value_and_origin("DEFAULT_HOST_LIST")
    except AnsibleError as exc:
        raise InventoryError(f"Ansible's configuration does not load: {exc}") from None
    if origin == "default" or not sources:
        return None
    if len(sources) > 1:
        raise InventoryError(f"Ansible is configured with {len(sources)} inventories ({', '.join(sources)}); "
                             "dapo-ops reads one: pass -i INVENTORY")
    return Path(sources[0])


def _ansible_path(value: str) -> str:
    """One path as Ansible resolves an exported ANSIBLE_INVENTORY (ansible/utils/path.py unfrackpath, follow=False):
    variables, then ~, then relative to the working directory. Spares every command the 0.1 s import of Ansible's
    configuration when the environment alone decides; a test holds it equal to Ansible's own answer."""
    path = os.path.expanduser(os.path.expandvars(value.strip()))
    return os.path.normpath(os.path.join(os.getcwd(), path))


def resolve_inventory(source: Path | str | None) -> Path:
    """-i's inventory, else the configured one; InventoryError saying how to give one when there is none."""
    path = Path(source) if source else configured_inventory()
    if path is None:
        raise InventoryError(NO_INVENTORY)
    return path


def load_inventory(source: Path | str | None = None, group: str = DEFAULT_GROUP) -> Inventory:
    path = resolve_inventory(source)
    return parse_inventory(load_raw(path), path, group)
