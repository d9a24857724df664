"""Start nodes on an already installed HDK/CANN, for `sim up --provisioned` and the fault knobs that ask for one.

The stand-in .run installers (driver and firmware built from the catalog at the version each node starts with,
CANN from the mirror) run inside the node, followed by the emulated reboot that activates the firmware. The node does
not see the simulator's state dir, where they are built or served: each is copied into the node's own /tmp for its
run, as an administrator would download it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_sim import artifacts, hwmodel, mirror, node
from dapo_sim.state import FleetSpec, NodeState

TOOLKIT_ENV = {"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"}

# (command, environment, the host file it runs as /tmp/<name> or None)
Step = tuple[list[str], dict[str, str], Path | None]


def _installer(path: Path, args: list[str], env: dict[str, str] | None = None) -> Step:
    return ["bash", f"/tmp/{path.name}", *args], env or {}, path


def preinstall(nodes: list[NodeState], spec: FleetSpec, faults: list[hwmodel.Fault], manifest: StackManifest,
               build_dir: Path, mirror_root: Path) -> None:
    """Install on each node what its faults and --provisioned ask for; installers are built into `build_dir`."""
    catalog = artifacts.load_catalog()
    firmware_driver = {fw: info["package_version"] for fw, info in catalog["firmwares"].items()}
    pinned = {k: manifest.artifact(k).version for k in ("driver", "firmware")}
    firmware_driver[pinned["firmware"]] = pinned["driver"]
    build_dir.mkdir(exist_ok=True)
    for n in nodes:
        start = hwmodel.hdk_start(n.name, faults, spec.provisioned, pinned["driver"], pinned["firmware"],
                                  firmware_driver)
        steps = _hdk_steps(start, manifest, build_dir)
        if spec.provisioned:
            steps += _cann_steps(manifest, mirror.MirrorLayout(mirror_root).artifacts)
        for step in steps:
            _run_step(n, step)
        _add_installer_faults(n, faults)


def _hdk_steps(start: hwmodel.HdkStart, manifest: StackManifest, build_dir: Path) -> list[Step]:
    steps: list[Step] = []
    for component, version, flags in (("driver", start.driver, ["--full", "--install-for-all"]),
                                      ("firmware", start.firmware, ["--full"])):
        if version is None:
            continue
        package = artifacts.catalog_package(manifest, component, version)
        path = build_dir / package.file
        path.write_bytes(artifacts.build(package))
        steps.append(_installer(path, [*flags, "--quiet", "--nox11"]))
    if steps:
        steps.append(([node.REBOOT_COMMAND], {}, None))
    if start.half_installed:
        steps.append((["rm", "-f", "/usr/local/Ascend/driver/tools/upgrade-tool"], {}, None))
    return steps


def _cann_steps(manifest: StackManifest, served: Path) -> list[Step]:
    """The pinned CANN toolkit, kernels and NNAL, from the mirror's artifacts directory."""
    return [
        _installer(served / manifest.artifact("cann_toolkit").file, ["--full", "--quiet"]),
        _installer(served / manifest.artifact("cann_kernels").file, ["--install", "--quiet"]),
        _installer(served / manifest.artifact("cann_nnal").file, ["--install", "--quiet"], TOOLKIT_ENV),
    ]


def _run_step(n: NodeState, step: Step) -> None:
    command, env, installer = step
    copy = Path(n.dir) / "tmp" / installer.name if installer else None  # the node's own /tmp
    if copy:
        shutil.copyfile(installer, copy)
    try:
        result = node.exec_in(n, command, env=env)
    finally:
        if copy:
            copy.unlink(missing_ok=True)
    # 2: installed, reboot required (the reboot is a step of its own)
    if result.returncode not in (0, 2):
        out = (result.stdout + result.stderr).strip().splitlines()
        raise SimError(f"preinstall on {n.name} failed ({' '.join(command[:2])}): "
                       f"{out[-1] if out else result.returncode}")


def _add_installer_faults(n: NodeState, faults: list[hwmodel.Fault]) -> None:
    """The installer fault (dkms-fail) goes into the hardware model only now, so that the preinstall succeeds."""
    extra = hwmodel.installer_faults(n.name, faults)
    if extra:
        hw_file = Path(n.dir) / "hw" / "hw.json"
        model = json.loads(hw_file.read_text())
        model["faults"].update(extra)
        hw_file.write_text(json.dumps(model, indent=1, sort_keys=True))
