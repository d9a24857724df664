"""`dapo-sim stage JOB`: the job's generated files (dapo_sim/stage.py) written to a controller directory, then put
on the simulated nodes by the product's own `dapo-ops stage` (dapo_ops/stage/run.py), as a user stages a real model:
checked at the source, hashed on each node, streamed through the nodes."""

from __future__ import annotations

import hashlib
import posixpath
import shutil
from pathlib import Path
from typing import Callable

from dapo_ops.errors import UsageError
from dapo_ops.inventory import load_inventory
from dapo_ops.job.spec import JobSpec
from dapo_ops.stage.run import Hooks, StageResult, stage
from dapo_ops.stage.source import Source
from dapo_sim.stage import job_files


def write_source(spec: JobSpec, files: dict[str, bytes], root: Path) -> tuple[Path, Path]:
    """The model directory under root/model, the data files by name under root/data (what --model-from and
    --data-from name); (model dir, data dir). Written afresh each time."""
    if root.exists():
        shutil.rmtree(root)
    model_dir, data_dir = root / "model", root / "data"
    model = spec.model.path.rstrip("/")
    data = {path for _, path in spec.data.paths()}
    names = [posixpath.basename(p) for p in data]
    if len(set(names)) != len(names):
        raise UsageError("dapo-sim stage needs the job's data files to have distinct file names")
    for path, content in files.items():
        if path in data:
            target = data_dir / posixpath.basename(path)
        elif posixpath.dirname(path) == model:
            target = model_dir / posixpath.basename(path)
        else:
            raise UsageError(f"{path}: neither in the model directory nor a data file of the job")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return model_dir, data_dir


def stage_job(spec: JobSpec, inventory: Path, scratch: Path, skip: tuple[str, ...] = (), weights_bytes: int = 0,
              say: Callable[[str], None] = lambda message: None) -> StageResult:
    """Every inventory node but `skip` gets the job's files through dapo-ops stage."""
    hosts = list(load_inventory(inventory).hosts)
    unknown = sorted(set(skip) - {h.name for h in hosts})
    if unknown:
        raise UsageError(f"--skip {', '.join(unknown)}: not a node of this fleet")
    chosen = [h for h in hosts if h.name not in skip]
    if not chosen:
        return StageResult("", 0, 0, "nothing to send", [])
    files = job_files(spec, weights_bytes)
    key = hashlib.sha256(repr((spec.model.path, sorted(files))).encode()).hexdigest()[:12]
    model_dir, data_dir = write_source(spec, files, scratch / key)
    return stage(spec, chosen, hosts, Source(None, str(model_dir)), Source(None, str(data_dir)), Hooks(say=say))
