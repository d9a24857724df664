"""`dapo-ops render`: the job's files from the Jinja2 templates in templates/ (deterministic; every shell value
goes through the `sh` filter, never quoted by hand; secrets are never written)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from dapo_ops.errors import InventoryError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.job.overrides import overrides
from dapo_ops.job.spec import JobSpec, SpecError
from dapo_ops.layout import node_layout
from dapo_ops.manifest import StackManifest
from dapo_ops.paths import PROJECT_ROOT

TEMPLATES = PROJECT_ROOT / "templates"
WORKER_START_TIMEOUT = 120
# `pgrep -f` pattern for any Ray process on a node (raylet, GCS, dashboard, monitors, workers); a bracketed first
# letter keeps it from matching the command line that carries it.
RAY_PROCESS_PATTERN = "[r]aylet|[g]cs_server|[r]ay/dashboard|[r]ay/_private|[r]ay/autoscaler|[r]ay::"


@dataclass(frozen=True)
class RenderNode:
    name: str
    ip: str
    nic: str
    env_script: str
    env_prefix: str
    verl_dir: str
    head: bool


def shell_quote(value) -> str:
    return shlex.quote(str(value))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["sh"] = shell_quote
    return env


def pick_nodes(spec: JobSpec, hosts: list[HostSpec], manifest: StackManifest) -> list[RenderNode]:
    """The job's nodes from the inventory: the head first (cluster.head, else the first host)."""
    if len(hosts) < spec.cluster.nodes:
        raise InventoryError(f"cluster.nodes is {spec.cluster.nodes} ({spec.cluster.nodes} x {spec.cluster.npus_per_node} "
                             f"NPUs) but the inventory has {len(hosts)} node(s): lower cluster.nodes or add nodes")
    names = [h.name for h in hosts]
    head = spec.cluster.head or names[0]
    if head not in names:
        raise SpecError(f"cluster.head: {head!r} is not in the inventory ({', '.join(names)})")
    ordered = [h for h in hosts if h.name == head] + [h for h in hosts if h.name != head]
    verl_dir_rel = manifest.source("verl").dir
    nodes = []
    for host in ordered[: spec.cluster.nodes]:
        nic = host.vars.get("dapo_hccl_ifname")
        if not nic:
            raise InventoryError(f"{host.name} has no dapo_hccl_ifname (the NIC for HCCL/GLOO/TP traffic)")
        layout = node_layout(host.vars)
        nodes.append(RenderNode(host.name, host.address, str(nic), layout["stack_env_script"],
                                layout["stack_env_prefix"], f"{layout['stack_src_root']}/{verl_dir_rel}",
                                host.name == head))
    return nodes


def render(spec: JobSpec, nodes: list[RenderNode], manifest: StackManifest) -> dict[str, str]:
    """Relative path -> file content. Per node: nodes/<host>/{env.sh,ray-start.sh}; the head also gets
    submit.sh and runtime_env.yaml; overrides.txt lists the Hydra overrides, one per line."""
    env = environment()
    head = nodes[0]
    t = spec.trainer
    common = {
        "job": spec, "head": head,
        "visible_devices": ",".join(str(i) for i in range(spec.cluster.npus_per_node)),
        "resources": json.dumps({"NPU": spec.cluster.npus_per_node}),
        "file_logger_path": f"{t.log_dir}/{t.project_name}/{t.experiment_name}.jsonl",
        "tensorboard_dir": f"{t.log_dir}/{t.project_name}/{t.experiment_name}/tensorboard",
        "head_address": f"{head.ip}:{spec.cluster.ray_port}",
        "dashboard_address": f"http://{head.ip}:{spec.cluster.dashboard_port}",
        "worker_start_timeout": WORKER_START_TIMEOUT,
        "ray_process_pattern": RAY_PROCESS_PATTERN,
    }
    files: dict[str, str] = {}
    for node in nodes:
        ctx = dict(common, node=node, ray=f"{node.env_prefix}/bin/ray")
        base = f"nodes/{node.name}"
        files[f"{base}/env.sh"] = env.get_template("env.sh.j2").render(ctx)
        files[f"{base}/ray-start.sh"] = env.get_template("ray-head.sh.j2" if node.head else "ray-worker.sh.j2").render(ctx)
        if node.head:
            files[f"{base}/submit.sh"] = env.get_template("submit.sh.j2").render(ctx)
            files[f"{base}/entrypoint.sh"] = env.get_template("entrypoint.sh.j2").render(
                ctx, verl_dir=head.verl_dir, python=f"{head.env_prefix}/bin/python3",
                overrides=overrides(spec, manifest))
            runtime_vars = {"VLLM_USE_V1": spec.env.vllm_use_v1, "VLLM_ASCEND_ENABLE_NZ": spec.env.vllm_ascend_enable_nz,
                            "HYDRA_FULL_ERROR": 1, "VERL_FILE_LOGGER_PATH": common["file_logger_path"],
                            "TENSORBOARD_DIR": common["tensorboard_dir"]}
            files[f"{base}/runtime_env.yaml"] = env.get_template("runtime_env.yaml.j2").render(
                ctx, runtime_env_vars=runtime_vars)
    files["overrides.txt"] = "\n".join(overrides(spec, manifest)) + "\n"
    return files


def write(files: dict[str, str], out: Path) -> None:
    """Write the rendered files (scripts executable, nothing secret among them)."""
    for rel, text in sorted(files.items()):
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel.endswith(".sh") and not rel.endswith("env.sh") else 0o644)
