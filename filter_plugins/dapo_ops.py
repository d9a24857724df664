"""Jinja filters that hand raw node output to dapo_ops's parsers and compatibility rules (on the controller)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from dapo_ops.ascend.compat import check_compatibility
from dapo_ops.ascend.version_files import parse_version_info
from dapo_ops.audit.facts import board as board_fact
from dapo_ops.audit.facts import ip as ip_fact
from dapo_ops.audit.facts import npu_smi_info as npu_smi_fact
from dapo_ops.audit.facts import toolkit_info as toolkit_fact
from dapo_ops.errors import ParseError


def _wrap(fn, text, *args):
    if text is None:
        return None
    try:
        return fn(text, *args)
    except ParseError as exc:
        raise AnsibleFilterError(str(exc)) from None


def version_info(text, command="cat version.info"):
    """key=value version file text -> dict (None stays None: not installed)."""
    return _wrap(parse_version_info, text, command)


# The filters below return what the audit's fact of the same output records (dapo_ops/audit/facts/), so a role
# and `dapo-ops audit` read one shape: e.g. an npu-smi info chip is {npu_id, chip_id, phy_id, device_id, ...}.


def toolkit_info(text):
    return _wrap(toolkit_fact.FACT.parse, text)


def npu_smi_info(text):
    """npu-smi info text -> {driver_version, npus (one per chip), processes}, as the npu_smi_info fact."""
    return _wrap(npu_smi_fact.FACT.parse, text)


def npu_smi_board(text):
    """npu-smi info -t board text -> {npu_id, software_version, firmware_version, compatibility, chip_count}."""
    return _wrap(board_fact.FACT.parse, text)


def ascend_compat(driver, firmware=None, toolkit=None):
    """Parsed version files -> list of incompatibility reasons (empty: compatible)."""
    return check_compatibility(driver or None, firmware or None, toolkit or None).reasons()


def python_stack_problems(installed, manifest_data):
    """The verify role's summary + the loaded manifest -> problems (empty: the pinned stack)."""
    from dapo_ops.manifest import parse_manifest
    from dapo_ops.stackcheck import python_stack_problems as check

    return check(installed or {}, parse_manifest(manifest_data))


def import_sweep_args(manifest_data, standins, src_root, cache):
    """The import sweep's arguments (dapo_ops.stack.imports.sweep_arguments) from the loaded manifest."""
    from dapo_ops.errors import DapoError
    from dapo_ops.manifest import parse_manifest
    from dapo_ops.stack.imports import import_standins, sweep_arguments

    try:
        names = import_standins({"dapo_import_standins": list(standins or [])})
        return sweep_arguments(parse_manifest(manifest_data), names, str(src_root), str(cache))
    except DapoError as exc:
        raise AnsibleFilterError(str(exc)) from None


def import_sweep(stdout):
    """The import sweep's output -> its verdict as a dict (the audit's import_sweep fact reads the same)."""
    from dapo_ops.stack.imports import parse_verdict

    return _wrap(lambda text: parse_verdict(text).as_dict(), stdout)


def hccn_ip(text):
    """hccn_tool -ip -g output -> {address, netmask} (both None when no IP is set)."""
    return _wrap(ip_fact.FACT.parse, text or "Get ipconf failed")


def hccn_problems(outputs, npu_ids):
    from dapo_ops.ascend.nic import nic_problems

    return nic_problems(outputs or {}, [int(n) for n in npu_ids])


def satisfies(dist, spec):
    """An installed distribution ({version} or None, as dapo_pip_dists reports it) satisfies a spec like '<2'."""
    from packaging.specifiers import SpecifierSet

    if not dist or not dist.get("version"):
        return False
    return SpecifierSet(spec).contains(dist["version"], prereleases=True)


def unsatisfied(dists, specs):
    """The pip requirements ('attrs==25.4.0') among specs (distribution -> specifier, in order) that the installed
    distributions (as dapo_pip_dists reports them) do not satisfy."""
    return [f"{name}{spec}" for name, spec in (specs or {}).items() if not satisfies((dists or {}).get(name), spec)]


def firewall_problems(outputs, ray_ports, hccl_ports):
    """Raw firewall command outputs (dapo_node_facts) + the wanted port maps -> one line per blocking firewall."""
    from dapo_ops.errors import InventoryError
    from dapo_ops.firewall import firewall_problems as problems

    try:
        return problems(outputs or {}, ray_ports, hccl_ports)
    except InventoryError as exc:
        raise AnsibleFilterError(str(exc)) from None


def host_memory_check(meminfo, job_file, npus_per_node, host):
    """/proc/meminfo text + the job spec the fleet is for + the node's NPUs -> {errors, warnings} of the job's host
    memory per node (dapo_ops/job/memory.py) against the node's MemTotal; no job file: nothing to check."""
    from dapo_ops.audit.facts.host_memory import parse
    from dapo_ops.errors import DapoError
    from dapo_ops.job.memory import host_memory_problems, host_need_gib
    from dapo_ops.job.spec import load_spec

    if not job_file:
        return {"errors": [], "warnings": []}
    try:
        need = host_need_gib(load_spec(job_file), int(npus_per_node))
        has = parse(meminfo or "")["mem_total_gib"]
    except (DapoError, ValueError) as exc:
        raise AnsibleFilterError(f"host memory check: {exc}") from None
    errors, warnings = host_memory_problems(need, {host: has})
    hint = f" (for the job {job_file}: set dapo_preflight_job to the spec this fleet is for, or '' to skip the check)"
    return {"errors": [e + hint for e in errors], "warnings": warnings}


def port_map_errors(ports, what):
    """An inventory port map ({name: port or 'first-last'}) -> [] or [the one-line reason it is invalid]; Ray's
    (dapo_ray_ports) is checked as `dapo-ops launch` checks it (known names, single ports, no overlap)."""
    from dapo_ops.errors import InventoryError
    from dapo_ops.firewall import parse_port_map
    from dapo_ops.ray_ports import INVENTORY_VAR, ray_ports

    try:
        ray_ports(ports, what) if what == INVENTORY_VAR else parse_port_map(ports, what)
    except InventoryError as exc:
        return [str(exc)]
    return []


def ray_ports_with_defaults(ports):
    """The inventory's dapo_ray_ports over dapo-ops' pinned defaults (dapo_ops/ray_ports.py), as name -> port."""
    from dapo_ops.errors import InventoryError
    from dapo_ops.ray_ports import ray_ports

    try:
        return ray_ports(ports).as_map()
    except InventoryError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ray_port_holders(listeners, ports, host):
    """`ss -Htlnpe` output + the inventory's dapo_ray_ports + the node -> {errors, warnings}: a non-root holder of a
    Ray port is an error (it would get what Ray's clients send there, the dashboard's token included); a root one a
    warning (a running job's own Ray, or a service the launch will refuse). dapo_ops/ray_listeners.py."""
    from dapo_ops.errors import InventoryError
    from dapo_ops.ray_listeners import parse_listeners, port_conflicts
    from dapo_ops.ray_ports import ray_ports

    try:
        wanted = list(ray_ports(ports).ranges)
    except InventoryError as exc:
        raise AnsibleFilterError(str(exc)) from None
    found = parse_listeners(listeners or "")
    errors = port_conflicts(found, wanted, host, allow_root=True)
    warnings = [line + ": the launch refuses it unless it is this fleet's Ray" for line in
                port_conflicts([item for item in found if item.uid == 0], wanted, host)]
    return {"errors": errors, "warnings": warnings}


def version_matches(dist, pinned):
    """An installed distribution ({version} as dapo_pip_dists reports it, a version string, or None) matches a pinned
    version: PEP 440-normalised public versions, the one rule dapo_ops.stackcheck applies (1.2.0.dev0 matches
    1.2.0.dev, 1.2.0+empty matches 1.2.0)."""
    from dapo_ops.stackcheck import version_matches as matches

    version = dist.get("version") if isinstance(dist, dict) else dist
    return matches(version, None if pinned is None else str(pinned))


def _hccn_filters():
    """The hccl_network role's filters (dapo_ops.ascend.nic.FILTERS), a ParseError becoming a filter error."""
    import functools

    from dapo_ops.ascend.nic import FILTERS

    return {name: functools.partial(_wrap, fn) for name, fn in FILTERS.items()}


def hdk_downgrades(state, artifacts, allowed=None):
    """ascend_hdk: `ascend_hdk_state | dapo_hdk_downgrades(stack.artifacts, ascend_hdk_downgrade)` -> why installing
    the pinned driver/firmware would go back to an older one (dapo_ops.ascend.compat.hdk_downgrades)."""
    from dapo_ops.ascend.compat import hdk_downgrades as downgrades

    pinned = {component: str(artifacts[component]["version"]) for component in ("driver", "firmware")}
    return downgrades({c: state.get(c) for c in pinned}, pinned, list(allowed or []))


def ansible_min_python(where="target"):
    """`'target' | dapo_ansible_min_python`: the oldest Python the installed ansible-core runs its modules with on a
    node (ansible/module_utils/basic.py _PY_MIN), as "3.8"."""
    if where != "target":
        raise AnsibleFilterError("dapo_ansible_min_python: only 'target' is known")
    try:
        from ansible.module_utils.basic import _PY_MIN
    except ImportError:
        raise AnsibleFilterError("dapo_ansible_min_python: this ansible-core does not say its minimum target Python "
                                 "(ansible/module_utils/basic.py _PY_MIN); set preflight_min_python") from None
    return ".".join(str(part) for part in _PY_MIN)


def busy_node_problems(outputs, allowed=None):
    """preflight: why provisioning this node would hit a live run (its run lock, processes on its NPUs), from the
    dapo_node_facts outputs `run_lock` and `npu_smi` (dapo_ops.launch.busy)."""
    from dapo_ops.launch.busy import busy_node_problems as problems

    def result(name):
        return int(outputs[name]["rc"]), outputs[name]["stdout"]

    return problems(result("run_lock"), result("npu_smi"), str(allowed) if allowed else None)


def node_path(name):
    """A node-side path the Python side owns: `'run_lock' | dapo_node_path` (dapo_ops.launch.locks.LOCK_FILE)."""
    from dapo_ops.launch.locks import LOCK_FILE

    paths = {"run_lock": LOCK_FILE}
    if name not in paths:
        raise AnsibleFilterError(f"dapo_node_path: no node path {name!r} (known: {', '.join(paths)})")
    return paths[name]


def lock_constraints(text, source="lock"):
    """A hashed lock's text -> the same pins without hashes, for pip's `constraint` option (a hashed constraint
    would switch every pip call into hash-checking mode, which refuses editable installs)."""
    from dapo_ops.stack.lock import LockParseError, parse_lock

    try:
        packages = parse_lock(text, source)
    except LockParseError as exc:
        raise AnsibleFilterError(str(exc)) from None
    if not packages:
        raise AnsibleFilterError(f"{source} pins no package: not a lock")
    return "".join(f"{p.name}=={p.version}" + (f" ; {p.markers}" if p.markers else "") + "\n"
                   for p in sorted(packages.values(), key=lambda p: p.name))


class FilterModule:
    def filters(self):
        return {
            "dapo_lock_constraints": lock_constraints,
            "dapo_busy_node_problems": busy_node_problems,
            "dapo_ansible_min_python": ansible_min_python,
            "dapo_hdk_downgrades": hdk_downgrades,
            "dapo_node_path": node_path,
            "dapo_firewall_problems": firewall_problems,
            "dapo_port_map_errors": port_map_errors,
            "dapo_host_memory_check": host_memory_check,
            "dapo_ray_ports_with_defaults": ray_ports_with_defaults,
            "dapo_ray_port_holders": ray_port_holders,
            "dapo_version_info": version_info,
            "dapo_toolkit_info": toolkit_info,
            "dapo_npu_smi_info": npu_smi_info,
            "dapo_npu_smi_board": npu_smi_board,
            "dapo_ascend_compat": ascend_compat,
            "dapo_python_stack_problems": python_stack_problems,
            "dapo_import_sweep_args": import_sweep_args,
            "dapo_import_sweep": import_sweep,
            "dapo_hccn_ip": hccn_ip,
            "dapo_satisfies": satisfies,
            "dapo_unsatisfied": unsatisfied,
            "dapo_hccn_problems": hccn_problems,
            **_hccn_filters(),
            "dapo_version_matches": version_matches,
        }
