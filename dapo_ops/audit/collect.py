"""Collecting audit facts: one shell script per host, one SSH round trip; bundles of the raw outputs on disk.

Bundle layout (also for outputs collected by other means, e.g. a site without SSH from the controller):

    DIR/bundle.json                   optional: {"schema": "dapo-ops/audit-bundle/v1", "hosts": {HOST: {...}}}
    DIR/HOST/<fact>.txt               the raw output of the fact's command (`dapo-ops audit --list-facts`)
    DIR/HOST/<fact>.<npu>.txt         per-NPU facts: board, link, net_health, ip (npu = 0 .. N-1)
    DIR/HOST/<fact>[.<npu>].rc        optional: the command's exit code when it was not 0
    DIR/HOST/unreachable.txt          optional: the host could not be reached (its text is the reason)
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from dapo_ops.audit.fact import Fact, NodeContext, all_facts
from dapo_ops.clock import utc_now
from dapo_ops.errors import UsageError
from dapo_ops.files import make_dirs, write_text
from dapo_ops.fleet.ssh import HostSpec, fan_out, run_on
from dapo_ops.layout import node_layout
from dapo_ops.userfile import load_json, read_bytes
from dapo_ops.model.variables import STACK_LOCK

BUNDLE_SCHEMA = "dapo-ops/audit-bundle/v1"
MAX_OUTPUT_BYTES = 4 << 20   # one raw output file in a bundle (a few KB in practice; a pip list ~20 KB)
_SECTION = re.compile(r"@@dapo-fact@@ (\S+)\n(.*?)\n@@dapo-rc@@ \1 (\d+)\n", re.DOTALL)


@dataclass
class HostRaw:
    """What was collected from one host: fact key -> (exit code, output), or why nothing was."""

    host: str
    npus_expected: int
    outputs: dict[str, tuple[int, str]] = field(default_factory=dict)
    unreachable: str | None = None
    seconds: float = 0.0
    source: str = "ssh"   # "ssh" or the bundle directory
    lock: str | None = None   # the inventory's STACK_LOCK: the lock this host installs from, not its platform's


def node_context(host_vars: dict, install_path: str) -> NodeContext:
    from dapo_ops.manifest import load_manifest
    from dapo_ops.stack.imports import AUDIT_DEADLINE, import_standins, sweep_arguments

    layout = node_layout(host_vars)
    sweep = sweep_arguments(load_manifest(), import_standins(host_vars), layout.src_root,
                            layout["stack_import_sweep_cache"], deadline=AUDIT_DEADLINE)
    return NodeContext(install_path=install_path, python=layout.python,
                       fact_file=layout["stack_fact_file"], env_script=layout.env_script,
                       import_sweep_args=tuple(sweep))


def planned(npus: int, facts: dict[str, Fact] | None = None) -> list[tuple[Fact, int | None]]:
    facts = facts or all_facts()
    plan = []
    for fact in facts.values():
        if fact.per_npu:
            plan += [(fact, npu) for npu in range(npus)]
        else:
            plan.append((fact, None))
    return plan


def _section(key: str, command: str) -> str:
    return (f"printf '\\n@@dapo-fact@@ %s\\n' {shlex.quote(key)}; {{ {command}; }} 2>&1; "
            f"printf '\\n@@dapo-rc@@ %s %d\\n' {shlex.quote(key)} $?")


def collection_script(ctx: NodeContext, npus: int) -> str:
    """One shell script printing every fact's output between markers, with its exit code.

    The facts that touch no device (the Python probes, most of a node's collection time) run in the background
    while the device tools run one after another, as they always have; their outputs are printed after, from a
    temporary directory. Without one (mktemp fails) every fact runs in turn."""
    plan = [(fact.key(npu), fact.command_for(ctx, npu), fact.beside_tools) for fact, npu in planned(npus)]
    serial = "\n".join(_section(key, command) for key, command, _ in plan)
    beside = [(key, command) for key, command, beside_tools in plan if beside_tools]
    if not beside:
        return serial + "\n"
    started = "\n".join(f"{{ {{ {command}; }} > \"$d/{i}\" 2>&1; echo $? > \"$d/{i}.rc\"; }} &"
                         for i, (_, command) in enumerate(beside))
    tools = "\n".join(_section(key, command) for key, command, beside_tools in plan if not beside_tools)
    printed = "\n".join(f"printf '\\n@@dapo-fact@@ %s\\n' {shlex.quote(key)}; command cat \"$d/{i}\"; "
                         f"rc=125; read -r rc < \"$d/{i}.rc\"; printf '\\n@@dapo-rc@@ %s %d\\n' {shlex.quote(key)} \"$rc\""
                         for i, (key, _) in enumerate(beside))
    return (f"if d=$(mktemp -d 2>/dev/null) && [ -d \"$d\" ]; then\n"
            f"trap 'rm -rf \"$d\"' EXIT\ntrap 'exit 129' HUP INT TERM\n"
            f"{started}\n{tools}\nwait\n{printed}\nelse\n{serial}\nfi\n")


def split_sections(output: str) -> dict[str, tuple[int, str]]:
    return {m.group(1): (int(m.group(3)), m.group(2)) for m in _SECTION.finditer(output)}


def collect_host(host: HostSpec, npus: int, install_path: str, timeout: float) -> HostRaw:
    started = time.monotonic()
    script = collection_script(node_context(host.vars, install_path), npus)
    result = run_on(host, script, timeout=timeout)
    raw = HostRaw(host.name, npus, seconds=time.monotonic() - started,
                  lock=str(host.vars.get(STACK_LOCK.name) or "") or None)
    if result.failure is not None:
        raw.unreachable = result.error
        return raw
    raw.outputs = split_sections(result.stdout)
    if not raw.outputs:
        raw.unreachable = f"the collection script printed nothing (exit {result.exit_code}): {result.stderr.strip()[-200:]}"
    return raw


def collect(hosts: list[HostSpec], npus_of, install_path: str, timeout: float, max_workers: int,
            on_done=None) -> tuple[list[HostRaw], bool]:
    """Collect from every host in parallel (at most max_workers at once). Returns (results in host order,
    interrupted?). On Ctrl-C the hosts not yet done are reported as not collected and the results so far are
    returned at once: the workers are daemon threads, so a host stuck in its connect cannot hold the exit."""
    def work(host: HostSpec) -> HostRaw:
        try:
            return collect_host(host, npus_of(host), install_path, timeout)
        except Exception as exc:  # a bug or an SSH library error must not lose the other hosts
            return HostRaw(host.name, npus_of(host), unreachable=f"collection failed: {exc}")

    done = fan_out(hosts, work, max_workers=max_workers, partial_on_interrupt=True,
                   on_done=(lambda name, raw: on_done(raw)) if on_done else None)
    results, interrupted = done.results, done.interrupted
    ordered = []
    for host in hosts:
        ordered.append(results.get(host.name) or HostRaw(host.name, npus_of(host), unreachable="not collected (interrupted)"))
    return ordered, interrupted


# ------------------------------------------------------------------------------------------------------ bundles


def write_bundle(directory: Path, raws: list[HostRaw]) -> None:
    make_dirs(directory)
    meta = {"schema": BUNDLE_SCHEMA, "collected_at": utc_now(),
            "hosts": {r.host: {"npus_per_node": r.npus_expected, "unreachable": r.unreachable} for r in raws}}
    for raw in raws:
        host_dir = directory / raw.host
        make_dirs(host_dir)
        if raw.unreachable:
            write_text(host_dir / "unreachable.txt", raw.unreachable + "\n")
        for key, (rc, text) in sorted(raw.outputs.items()):
            write_text(host_dir / f"{key}.txt", text)
            if rc != 0:
                write_text(host_dir / f"{key}.rc", f"{rc}\n")
    write_text(directory / "bundle.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _bundle_hosts(directory: Path) -> dict[str, dict]:
    """bundle.json's hosts (host -> {"npus_per_node": N, ...}); {} without a bundle.json."""
    meta_file = directory / "bundle.json"
    if not meta_file.exists():
        return {}
    meta = load_json(meta_file, what="audit bundle")
    if not isinstance(meta, dict):
        raise UsageError(f"{meta_file}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("schema") != BUNDLE_SCHEMA:
        raise UsageError(f"{meta_file}: unknown schema {meta.get('schema')!r} (expected {BUNDLE_SCHEMA})")
    hosts = meta.get("hosts", {})
    if not isinstance(hosts, dict) or not all(isinstance(entry, dict) for entry in hosts.values()):
        raise UsageError(f"{meta_file}: hosts: expected an object of host objects")
    for host, entry in hosts.items():
        npus = entry.get("npus_per_node")
        if npus is not None and (isinstance(npus, bool) or not isinstance(npus, int) or npus < 0):
            raise UsageError(f"{meta_file}: hosts.{host}.npus_per_node: expected a whole number, got {npus!r}")
    return hosts


def _read_output(path: Path) -> str:
    """A raw output as text: at most MAX_OUTPUT_BYTES (larger: a one-line error), bytes that are not UTF-8
    replaced (the fact's parser then reports what it cannot read as a collect-failed finding)."""
    if not path.is_file():   # a FIFO would block, a device never end
        raise UsageError(f"audit bundle file {path}: not a regular file")
    return read_bytes(path, "audit bundle file", MAX_OUTPUT_BYTES).decode("utf-8", errors="replace")


def _exit_code(rc_file: Path) -> int:
    if not rc_file.exists():
        return 0
    try:
        return int(_read_output(rc_file).strip())
    except ValueError:
        return -1


def _read_host(host_dir: Path, npus: int | None, directory: Path) -> HostRaw:
    outputs: dict[str, tuple[int, str]] = {}
    for path in sorted(host_dir.glob("*.txt")):
        if path.name == "unreachable.txt":
            continue
        outputs[path.name[: -len(".txt")]] = (_exit_code(path.with_suffix(".rc")), _read_output(path))
    if npus is None:
        npus = len({k.split(".")[1] for k in outputs if k.startswith("board.")}) or 0
    reason = host_dir / "unreachable.txt"
    unreachable = _read_output(reason).strip() if reason.exists() else None
    return HostRaw(host_dir.name, npus, outputs, unreachable, source=str(directory))


def read_bundle(directory: Path, npus_default: int | None = None) -> list[HostRaw]:
    """Every host directory's outputs; a bundle that cannot be read is a one-line UsageError (dapo_ops.userfile)."""
    if not directory.is_dir():
        raise UsageError(f"bundle {directory} is not a directory")
    host_meta = _bundle_hosts(directory)
    raws = [_read_host(host_dir, host_meta.get(host_dir.name, {}).get("npus_per_node") or npus_default, directory)
            for host_dir in sorted(p for p in directory.iterdir() if p.is_dir())]
    if not raws:
        raise UsageError(f"bundle {directory} has no host directories")
    return raws
