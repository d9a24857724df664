"""`dapo-ops sim stage`: which files a job needs on a node, and where they land in a node's private /data."""

import json
from pathlib import Path

import pytest

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import load_spec
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.sim.hwmodel import product_name
from dapo_ops.sim.stage import PARQUET_PLACEHOLDER, job_files, node_path

SPEC = load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml")


def test_the_job_gets_a_model_config_and_its_data_files():
    files = job_files(SPEC)
    config = json.loads(files["/data/models/Qwen3-30B-A3B/config.json"])
    assert config["num_hidden_layers"] == 48 and config["num_experts"] == 128 and config["model_type"] == "qwen3_moe"
    assert files[SPEC.data.train_files] == files[SPEC.data.val_files] == PARQUET_PLACEHOLDER
    assert PARQUET_PLACEHOLDER.startswith(b"PAR1") and PARQUET_PLACEHOLDER.endswith(b"PAR1")


def test_files_land_in_the_nodes_own_data_directory_and_nowhere_else():
    root = Path("/state/nodes/node1")
    assert node_path(root, "/data/dapo/x.parquet") == root / "data" / "dapo" / "x.parquet"
    for bad in ("/etc/passwd", "/data/../etc/passwd", "/data", "relative/x"):
        with pytest.raises(UsageError, match="under /data only"):
            node_path(root, bad)


def test_products_by_npu_count():
    assert (product_name(8), product_name(16)) == ("Atlas 800T A2", "Atlas 200T A2 Box16")
