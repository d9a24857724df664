"""The mirror from inside a node: installers, the package index (real and stand-in wheels), git, conda."""

import pytest

from dapo_ops.manifest import load_manifest
from dapo_sim.fleet import FleetSpec

from .helpers import hosts, sh


@pytest.fixture(scope="module")
def node(sim):
    sim.down()
    sim.up(FleetSpec(nodes=1, npus_per_node=8, provisioned=True))
    return hosts()["node1"]


def pip(node, venv, args, ok=True):
    index = node.vars["dapo_pip_index_url"]
    return sh(node, f"PIP_CONFIG_FILE=/dev/null {venv}/bin/pip install -q --disable-pip-version-check "
                    f"--index-url {index} --trusted-host {node.vars['dapo_pip_trusted_host']} {args}",
              timeout=300, ok=ok)


def test_torch_npu_stand_in_behaves_like_the_abi_bound_extension(node):
    manifest = load_manifest()
    torch_npu = manifest.pinned_version("torch_npu")
    sh(node, "python3 -m venv /opt/t")
    pip(node, "/opt/t", f"torch_npu=={torch_npu}")  # pulls the matching torch
    assert sh(node, "/opt/t/bin/python -c 'import torch; print(torch.__version__)'").stdout.strip() == \
        manifest.pinned_version("torch")
    unsourced = sh(node, "/opt/t/bin/python -c 'import torch_npu'", ok=False)
    assert unsourced.exit_code == 1 and "libhccl.so" in unsourced.stderr
    sourced = sh(node, "bash -c 'source /usr/local/Ascend/ascend-toolkit/set_env.sh && "
                       "/opt/t/bin/python -c \"import torch_npu; print(torch_npu.__version__)\"'")
    assert sourced.stdout.strip() == torch_npu
    # torch_npu without (the right) torch: pip refuses, like the real wheel's pin
    sh(node, "python3 -m venv /opt/u")
    refused = pip(node, "/opt/u", f"--no-deps torch==0.0.1 torch_npu=={torch_npu}", ok=False)
    assert refused.exit_code != 0


def test_real_wheels_are_served(node):
    sh(node, "python3 -m venv /opt/r")
    pip(node, "/opt/r", f"'ray[default]{load_manifest().packages['ray']}' hydra-core")
    assert sh(node, "/opt/r/bin/ray --version").stdout.startswith("ray, version")


def test_git_repositories_at_the_pinned_tags(node):
    manifest = load_manifest()
    base = node.vars["dapo_git_base_url"]
    for key in ("vllm", "vllm_ascend", "verl"):
        source = manifest.source(key)
        sh(node, f"git clone -q --depth 1 --branch {source.ref} {base}/{source.repo}.git /opt/src/{source.dir}")
        assert sh(node, f"git -C /opt/src/{source.dir} describe --tags").stdout.strip() == source.ref
    verl = manifest.source("verl")
    sh(node, f"test -f /opt/src/{verl.dir}/{verl.extra['recipe_config']}")
    sh(node, f"test -f /opt/src/{verl.dir}/{verl.extra['requirements']}")
    sh(node, f"test -f /opt/src/{verl.dir}/verl/trainer/config/ppo_trainer.yaml")


def test_conda_stand_in(node):
    manifest = load_manifest()
    conda = manifest.artifact("conda_installer")
    sh(node, f"curl -fsS -o /tmp/conda.sh {node.vars['dapo_artifact_url']}/{conda.file}")
    sh(node, "bash /tmp/conda.sh -b -k -p /opt/miniconda3")
    again = sh(node, "bash /tmp/conda.sh -b -p /opt/miniconda3", ok=False)
    assert again.exit_code == 1 and "already exists" in again.stdout
    # the node reaches no conda channel: only --offline (the installer's package cache) works
    online = sh(node, f"/opt/miniconda3/bin/conda create -n online python={manifest.python_version} -y", ok=False)
    assert online.exit_code == 1 and "CondaHTTPError: HTTP 000 CONNECTION FAILED" in online.stderr
    wrong = sh(node, "/opt/miniconda3/bin/conda create -n bad python=3.12 -y --offline", ok=False)
    assert wrong.exit_code == 1 and "PackagesNotFoundError" in wrong.stderr
    sh(node, f"/opt/miniconda3/bin/conda create -n dapo python={manifest.python_version} -y --offline")
    version = sh(node, "/opt/miniconda3/bin/conda run -n dapo python -c 'import sys; print(sys.version_info[:2])'")
    assert version.stdout.strip() == str(tuple(int(x) for x in manifest.python_version.split(".")))
    assert "dapo" in sh(node, "/opt/miniconda3/bin/conda env list").stdout
