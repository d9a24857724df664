"""`dapo-ops render`: the job's files from the Jinja2 templates in templates/ (deterministic; every shell value
goes through the `sh` filter, never quoted by hand; secrets are never written)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import jinja2

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.nic import hccl_nic
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.job.npu_env import task_queue_enable
from dapo_ops.job.checkpoints import CheckpointRun, checkpoint_root
from dapo_ops.job.overrides import overrides
from dapo_ops.job.ray_tls import CA_NAME, CERT_NAME, KEY_NAME, TLS_VAR, tls_wanted
from dapo_ops.job.secrets import runtime_env_paths
from dapo_ops.job.spec import JobSpec
from dapo_ops.manifest import StackManifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.ray_listeners import dashboard_guard
from dapo_ops.ray_ports import INVENTORY_VAR as RAY_PORTS_VAR, LOCAL, PEER, ray_ports
from dapo_ops.model.values import ansible_bool
from dapo_ops.model.variables import HCCL_IP, RAY_FIREWALL, RUN_FENCE_NIC

TEMPLATES = PROJECT_ROOT / "templates"
WORKER_START_TIMEOUT = 120
# `pgrep -f` pattern for any Ray process on a node (raylet, GCS, dashboard, monitors, workers); a bracketed first
# letter keeps it from matching the command line that carries it.
RAY_PROCESS_PATTERN = "[r]aylet|[g]cs_server|[r]ay/dashboard|[r]ay/_private|[r]ay/autoscaler|[r]ay::"
# "Is Ray running here": root's Ray processes only (dapo-ops runs Ray as root; another user's process named like
# Ray must not make a node look busy, nor stop a teardown).
RAY_RUNNING = f"pgrep -u 0 -f {shlex.quote(RAY_PROCESS_PATTERN)} >/dev/null"
# Ray's temp dir (sockets, session logs), inside a root-only directory: Ray makes its temp dir world-writable
# (ray/_private/utils.py try_to_create_directory), and /tmp/ray can be taken by any user first. Only the head's
# `ray start --temp-dir` sets it; workers use the head's path (ray/scripts/scripts.py), so every node makes RAY_ROOT.
RAY_ROOT = "/var/lib/dapo-ops/ray"
RAY_TEMP_DIR = f"{RAY_ROOT}/tmp"
# A run's files on every node: RUNS_ROOT/<run id> (the run record's node_dir).
RUNS_ROOT = "/var/lib/dapo-ops/runs"
FIREWALL_VAR = RAY_FIREWALL.name
FENCE_NIC_VAR = RUN_FENCE_NIC.name
RAY_TOKEN_NAME = "ray-token"


def node_dir(run_id: str) -> str:
    return f"{RUNS_ROOT}/{run_id}"


def ray_token_path(run_id: str) -> str:
    """The run's Ray token file on every node (0600, written by launch, deleted with the run's other files)."""
    return f"{node_dir(run_id)}/{RAY_TOKEN_NAME}"


def tls_paths(run_id: str) -> dict[str, str]:
    """The run's Ray TLS files on every node (RAY_TLS: the CA's certificate, the node's own and its key)."""
    return {"ca": f"{node_dir(run_id)}/{CA_NAME}", "cert": f"{node_dir(run_id)}/{CERT_NAME}",
            "key": f"{node_dir(run_id)}/{KEY_NAME}"}


def firewall_table(run_id: str) -> str:
    """The run's nftables table (inet family): `dapo_ops_` and the run id with every other character as `_`
    (an nft identifier is a letter or `_`, then letters, digits, `_`, `.`, `/`, `-`)."""
    return "dapo_ops_" + re.sub(r"[^A-Za-z0-9_]", "_", run_id)


def dashboard_url(spec: JobSpec) -> str:
    """Ray's dashboard, bound to the head's loopback (ray-head.sh): reached from the head only, over SSH."""
    return f"http://127.0.0.1:{spec.cluster.dashboard_port}"


@dataclass(frozen=True)
class RenderNode:
    name: str
    ip: str | None            # the HCCL NIC's address; None: the scripts read it on the node (render offline)
    nic: str
    env_script: str
    python: str
    ray: str
    verl_dir: str
    head: bool
    ray_ports: object = None    # the inventory's RAY_PORTS (dapo_ops/ray_ports.py fills the defaults)
    firewall: bool = True       # RAY_FIREWALL: the run's nftables table keeps Ray's ports to the run's nodes
    fence_nic: bool = True      # RUN_FENCE_NIC: the table also drops new TCP on the HCCL NIC from other hosts
    ssh_port: int = 22          # kept open on that NIC (the inventory's ansible_port)
    tls: bool = False           # RAY_TLS: Ray's gRPC over mutual TLS with the run's certificates (ray_tls.py)


def shell_quote(value) -> str:
    return shlex.quote(str(value))


def nft_string(value) -> str:
    """An nftables quoted string (an interface name: hccl_nic has checked its characters already)."""
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", text):
        raise RenderError(f"{text!r} cannot be named in an nftables rule")
    return f'"{text}"'


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["sh"] = shell_quote
    env.filters["nft_string"] = nft_string
    return env


def pick_nodes(hosts: list[HostSpec], manifest: StackManifest, addresses: dict[str, str | None]) -> list[RenderNode]:
    """RenderNodes for a job's hosts in rank order (placement.place: the head first), each with the address of its
    HCCL NIC (fleet.nic.read_addresses), which HCCL_IF_IP and Ray's node IP use; a node without one (`render` with
    no HCCL_IP: it reaches no node) reads its own at start, and what needs another node's stops saying so."""
    verl_dir_rel = manifest.source("verl").dir
    nodes = []
    for index, host in enumerate(hosts):
        layout = host.layout
        nodes.append(RenderNode(host.name, addresses.get(host.name), hccl_nic(host), layout.env_script,
                                layout.python, layout.ray, f"{layout.src_root}/{verl_dir_rel}", index == 0,
                                host.vars.get(RAY_PORTS_VAR),
                                ansible_bool(host.vars.get(FIREWALL_VAR), FIREWALL_VAR, True, host.name),
                                ansible_bool(host.vars.get(FENCE_NIC_VAR), FENCE_NIC_VAR, True, host.name), int(host.port),
                                tls_wanted(host.vars.get(TLS_VAR), host.name)))
    if len({n.tls for n in nodes}) > 1:
        raise UsageError(f"{TLS_VAR} must be the same on every node of a run (true on "
                         f"{', '.join(n.name for n in nodes if n.tls)}, not on "
                         f"{', '.join(n.name for n in nodes if not n.tls)}): a node without TLS cannot reach one with it")
    return nodes


@dataclass(frozen=True)
class JobPaths:
    """Where the job writes, on every node (verl's TaskRunner and its workers may land on any of them)."""

    file_logger: str     # VERL_FILE_LOGGER_PATH: one file per launch attempt (verl opens it with "w")
    tensorboard: str     # TENSORBOARD_DIR
    checkpoints: str     # trainer.default_local_dir

    def directories(self) -> list[str]:
        return sorted({str(PurePosixPath(self.file_logger).parent), self.tensorboard, self.checkpoints})


def job_paths(spec: JobSpec, attempt: str | None = None, chain: str | None = None) -> JobPaths:
    """verl's FileLogger (v0.7.0 verl/utils/tracking.py) opens VERL_FILE_LOGGER_PATH with "w" and creates no
    directory: each attempt (a launch's run id) gets its own file, so a resume does not truncate the last one's."""
    t = spec.trainer
    base = f"{t.log_dir}/{t.project_name}/{t.experiment_name}"
    return JobPaths(file_logger=f"{base}/metrics-{attempt or 'render'}.jsonl", tensorboard=f"{base}/tensorboard",
                    checkpoints=checkpoint_root(spec, chain))


def render(spec: JobSpec, nodes: list[RenderNode], manifest: StackManifest, attempt: str | None = None,
           checkpoints: CheckpointRun | None = None) -> dict[str, str]:
    """Relative path -> file content. Per node: nodes/<host>/{env.sh,ray-start.sh}; the head also gets
    submit.sh and runtime_env.yaml; overrides.txt lists the Hydra overrides, one per line. `spec` is placed
    (placement.place); `attempt` names this launch attempt's metrics file, `checkpoints` its checkpoint chain."""
    env = environment()
    head = nodes[0]
    paths = job_paths(spec, attempt, checkpoints.chain if checkpoints else None)
    ports = ray_ports(head.ray_ports, gcs=spec.cluster.ray_port, dashboard=spec.cluster.dashboard_port)
    common = {
        "job": spec, "head": head,
        "visible_devices": ",".join(str(i) for i in range(spec.cluster.npus_per_node)),
        "resources": json.dumps({"NPU": spec.cluster.npus_per_node}),
        "file_logger_path": paths.file_logger,
        "tensorboard_dir": paths.tensorboard,
        "job_directories": paths.directories(),
        "task_queue_enable": task_queue_enable(spec),
        "head_address": f"{head.ip}:{spec.cluster.ray_port}" if head.ip else "",
        "dashboard_address": dashboard_url(spec),
        "dashboard_guard": dashboard_guard(spec.cluster.dashboard_port),
        "worker_start_timeout": WORKER_START_TIMEOUT,
        "ray_running": RAY_RUNNING,
        "ray_root": RAY_ROOT, "ray_temp_dir": RAY_TEMP_DIR,
        "ports": ports, "peer_ports": ports.nft_set(PEER), "local_ports": ports.nft_set(LOCAL),
        "ray_token_path": ray_token_path(attempt or "render"),
        "tls": head.tls, "tls_files": tls_paths(attempt or "render"),
        "peers4": _addresses(nodes, 4), "peers6": _addresses(nodes, 6), "firewall_table": firewall_table(attempt or "render"),
        "peers_unknown": [n.name for n in nodes if not n.ip],
        "unknown_peers_message": "the run's firewall admits the run's nodes by address, and this render has none for "
                                 + ", ".join(n.name for n in nodes if not n.ip) + f": set {HCCL_IP} for them in the "
                                 "inventory and render again, or start the job with dapo-ops launch, which reads them",
    }
    files: dict[str, str] = {}
    for node in nodes:
        ctx = dict(common, node=node, ray=node.ray)
        base = f"nodes/{node.name}"
        files[f"{base}/env.sh"] = env.get_template("env.sh.j2").render(ctx)
        files[f"{base}/ray-start.sh"] = env.get_template("ray-head.sh.j2" if node.head else "ray-worker.sh.j2").render(ctx)
        if node.firewall and not common["peers_unknown"]:
            files[f"{base}/ray-firewall.nft"] = env.get_template("ray-firewall.nft.j2").render(ctx)
        if node.head:
            files[f"{base}/submit.sh"] = env.get_template("submit.sh.j2").render(ctx)
            files[f"{base}/entrypoint.sh"] = env.get_template("entrypoint.sh.j2").render(
                ctx, verl_dir=head.verl_dir, python=head.python,
                overrides=overrides(spec, manifest, run=checkpoints))
            runtime_vars = {"VLLM_USE_V1": spec.env.vllm_use_v1, "VLLM_ASCEND_ENABLE_NZ": spec.env.vllm_ascend_enable_nz,
                            "HYDRA_FULL_ERROR": 1, "VERL_FILE_LOGGER_PATH": paths.file_logger,
                            "TENSORBOARD_DIR": paths.tensorboard}
            # the paths of the run's 0600 secret files (job/secrets.py), never a key
            runtime_vars.update(runtime_env_paths(spec, node_dir(attempt or "render")))
            files[f"{base}/runtime_env.yaml"] = env.get_template("runtime_env.yaml.j2").render(
                ctx, runtime_env_vars=runtime_vars)
    files["overrides.txt"] = "\n".join(overrides(spec, manifest, run=checkpoints)) + "\n"
    prove_scripts(files)
    return files


class RenderError(DapoError):
    """A rendered script does not parse: a bug in a template or its quoting; nothing is written."""


def _addresses(nodes: list[RenderNode], version: int) -> list[str]:
    """The nodes' Ray addresses of one IP version, for the firewall's peer sets (each must be an IP literal)."""
    found = set()
    for node in (n for n in nodes if n.ip):
        try:
            address = ipaddress.ip_address(node.ip)
        except ValueError:
            raise RenderError(f"{node.name}: the Ray address {node.ip!r} is not an IP address") from None
        if address.version == version:
            found.add(str(address))
    return sorted(found)


def prove_scripts(files: dict[str, str]) -> None:
    """Every rendered shell script parses (`bash -n`), so a value that slipped past the spec's checks cannot reach
    a node as a broken or rewritten script."""
    for name, text in sorted(files.items()):
        if not name.endswith(".sh"):
            continue
        check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            first = (check.stderr.strip().splitlines() or ["bash -n failed"])[0]
            raise RenderError(f"rendered {name} does not parse as bash ({first}); nothing was written")


def file_mode(name: str) -> int:
    """A rendered file's mode, locally and on the nodes: the scripts run (0755); env.sh is sourced, like every
    other file read only (0644)."""
    return 0o755 if name.endswith(".sh") and Path(name).name != "env.sh" else 0o644


def write(files: dict[str, str], out: Path) -> None:
    """Write the rendered files (scripts executable, nothing secret among them) into `out`: all of them are
    written to a staging directory beside it first, then moved in (files already in `out` that are not ours stay)."""
    from dapo_ops.errors import UsageError
    from dapo_ops.files import make_dirs, write_text

    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"cannot write the rendered files to {out}: it is not a directory")
    staging = out.with_name(f".{out.name}.rendering-{os.getpid()}")
    try:
        for rel, text in sorted(files.items()):
            write_text(staging / rel, text, file_mode(rel))
        for rel in sorted(files):
            make_dirs((out / rel).parent)
            os.replace(staging / rel, out / rel)
    except OSError as exc:
        raise UsageError(f"cannot write the rendered files to {out}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
