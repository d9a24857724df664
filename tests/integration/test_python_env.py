"""The python layer alone (`site.yml --tags python`) on a provisioned node that has no conda channel access: the
env is created offline from the Miniconda installer's package cache, and the official recipe's packages go in in
order (CANN's Python deps with numpy<2, torch, torch_npu, torchvision, then triton-ascend after removing any
triton), idempotently and honestly in check mode."""

import json
import re
import shlex

import pytest

from dapo_ops.manifest import load_manifest
from dapo_sim import wheels
from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh

CONDA = "/opt/miniconda3/bin/conda"
ENV = "/opt/miniconda3/envs/dapo"
MIRROR = "http://10.77.0.1:8765"


def changed_tasks(output: str) -> list[str]:
    """The python_env tasks that reported `changed`, in the order they ran."""
    tasks, current = [], None
    for line in output.splitlines():
        match = re.match(r"TASK \[python_env : (.*)\] \*+", line)
        if match:
            current = match.group(1)
        elif line.startswith("TASK ["):
            current = None
        elif current and line.startswith("changed:"):
            tasks.append(current)
    return tasks


def pip_list(host) -> dict[str, str]:
    out = sh(host, f"{ENV}/bin/pip list --format json --disable-pip-version-check").stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(out)}


def test_a_platform_without_a_lock_is_refused_before_anything_is_installed(sim):
    """The simulated nodes are x86_64, whose lock is not in force: without the inventory's dapo_stack_lock the
    layer stops at its first step, naming the platform and the manifest's reason, and installs nothing."""
    sim.down()
    sim.up(FleetSpec(nodes=1, provisioned=True))
    node = hosts()["node1"]
    rc, output, _ = playbook("--tags", "python", "-e", "dapo_stack_lock=")
    assert rc != 0 and "no stack lock is in force for x86_64 (not resolved yet" in output, output[-3000:]
    assert sh(node, "test -e /opt/miniconda3", ok=False).exit_code == 1


@pytest.fixture(scope="module")
def first_run(sim):
    sim.down()
    sim.up(FleetSpec(nodes=1, provisioned=True))
    node = hosts()["node1"]
    rc, output, recap = playbook("--tags", "python")
    assert rc == 0, output[-3000:]
    return node, output, recap


def test_node_has_no_channel_access_and_the_env_was_created_offline(first_run):
    node, _, recap = first_run
    assert recap["node1"]["changed"] > 0
    probe = sh(node, f"{CONDA} create -n probe python={load_manifest().python_version} -y", ok=False)
    assert probe.exit_code == 1 and "CondaHTTPError: HTTP 000 CONNECTION FAILED" in probe.stderr, probe.stderr
    history = sh(node, f"cat {ENV}/conda-meta/history").stdout
    assert "--offline" in history and "-c " not in history, history
    assert sh(node, "ls /opt/miniconda3/pkgs").stdout.split().count("urls.txt") == 1  # installer ran with -k


def test_recipe_packages_installed_in_order(first_run):
    node, output, _ = first_run
    manifest = load_manifest()
    order = [t for t in changed_tasks(output) if t.startswith(("Install", "Remove", "Create"))]
    assert order == [
        "Install Miniconda in batch mode, keeping its package cache",
        "Create the environment with the installer's Python (no channel access unless a channel mirror is set)",
        "Install the lock's pip and packaging tools",
        "Install numpy<2 and CANN's Python dependencies for online operator compilation, in one pip call",
        "Install torch",
        "Install torch_npu",
        "Install torchvision, matched to torch",
        "Install the pinned triton-ascend",  # after a removal that found nothing to remove (ok, not changed)
    ], order
    assert "TASK [python_env : Remove triton and triton-ascend left by earlier or third-party installs]" in output
    installed = pip_list(node)
    expected = {name: spec[2:] for name, spec in wheels.cann_deps(manifest).items()}
    expected |= {p.replace("_", "-"): manifest.pinned_version(p)
                 for p in ("torch", "torch_npu", "torchvision", "triton_ascend")}
    for name, version in expected.items():
        assert installed.get(name.lower().replace("_", "-")) == version, name
    assert installed["numpy"].startswith("1.") and "triton" not in installed


def test_every_installed_distribution_is_the_locked_version(first_run):
    """The layer installs from the lock only: everything in the env, pip and setuptools included, is pinned there."""
    from dapo_ops.stack.lock import parse_lock

    node, _, _ = first_run
    lock_path = node.vars["dapo_stack_lock"]
    locked = parse_lock(open(lock_path).read(), lock_path)
    installed = pip_list(node)
    assert {"pip", "setuptools", "wheel", "torch", "sympy", "networkx"} <= set(installed)
    assert {n: v for n, v in installed.items() if locked.get(n) is None or locked[n].version != v} == {}
    conf = sh(node, f"cat {ENV}/pip.conf").stdout
    assert f"constraint = {ENV}/stack-constraints.txt" in conf
    assert "--hash" not in sh(node, f"cat {ENV}/stack-constraints.txt").stdout


def test_a_package_the_lock_lacks_fails_the_install_naming_it(first_run, tmp_path):
    """A lock without mpmath (which the locked sympy requires): the layer refuses before installing anything, naming
    the package, and the full lock repairs the node."""
    node, _, _ = first_run
    lock_path = node.vars["dapo_stack_lock"]
    text = open(lock_path).read()
    partial = tmp_path / "lock-without-mpmath.txt"
    partial.write_text(re.sub(r"^mpmath==.*?(?=^\S)", "", text, count=1, flags=re.M | re.S))
    assert "mpmath" not in partial.read_text().split("\n# via")[0] and len(partial.read_text()) < len(text)
    sh(node, f"{ENV}/bin/pip uninstall -y -q sympy mpmath")
    rc, output, _ = playbook("--tags", "python", "-e", f"dapo_stack_lock={partial}")
    assert rc != 0 and re.search(r"does not pin: mpmath \S+ is not in the lock", output), output[-3000:]
    installed = pip_list(node)
    assert "mpmath" not in installed and "sympy" not in installed  # nothing half-installed
    rc, output, _ = playbook("--tags", "python")
    assert rc == 0, output[-3000:]
    assert {"mpmath", "sympy"} <= set(pip_list(node))


def test_an_off_lock_version_is_named_by_the_audit(first_run, tmp_path):
    """mpmath 1.2.1 put in by hand (no constraints, no index): the audit names host, package, locked, installed."""
    import base64
    import subprocess
    import sys

    node, _, _ = first_run
    lock_path = node.vars["dapo_stack_lock"]
    from dapo_ops.stack.lock import parse_lock
    locked = parse_lock(open(lock_path).read(), lock_path)["mpmath"].version
    wheel = wheels.build_wheel(tmp_path, "mpmath", "1.2.1", {"mpmath/__init__.py": "__version__ = '1.2.1'\n"})
    payload = base64.b64encode(wheel.read_bytes()).decode()
    sh(node, f"echo {payload} | base64 -d > /tmp/{wheel.name} && PIP_CONFIG_FILE=/dev/null {ENV}/bin/pip install "
             f"-q --no-deps --no-index --force-reinstall /tmp/{wheel.name}")
    try:
        result = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json"], capture_output=True,
                                text=True, timeout=300)
        report = json.loads(result.stdout)
        findings = [f for f in report["findings"] if f["code"] == "dist-off-lock"]
        assert result.returncode == 1
        assert [(f["host"], f["component"], f["expected"], f["actual"]) for f in findings] == \
            [("node1", "mpmath", locked, "1.2.1")], findings
    finally:
        rc, output, _ = playbook("--tags", "python")
        assert rc == 0 and pip_list(node)["mpmath"] == locked, output[-3000:]


def test_third_party_triton_is_replaced_by_the_pinned_triton_ascend(first_run):
    node, _, _ = first_run
    manifest = load_manifest()
    sh(node, f"PIP_CONFIG_FILE={ENV}/pip.conf {ENV}/bin/pip install --quiet triton=={wheels.TRITON_CUDA_VERSION}")
    clobbered = sh(node, f"{ENV}/bin/python -c 'import triton; print(triton.__version__)'").stdout.strip()
    assert clobbered == wheels.TRITON_CUDA_VERSION  # CUDA triton took over the shared triton/__init__.py
    rc, output, recap = playbook("--tags", "python")
    assert rc == 0 and recap["node1"]["changed"] > 0, output[-3000:]
    assert [t for t in changed_tasks(output) if t.startswith(("Install", "Remove"))] == [
        "Remove triton and triton-ascend left by earlier or third-party installs", "Install the pinned triton-ascend"]
    installed = pip_list(node)
    assert "triton" not in installed and installed["triton-ascend"] == manifest.pinned_version("triton_ascend")
    probe = sh(node, f"{ENV}/bin/python -c 'import triton, triton.backends.ascend; print(triton.__version__)'")
    from packaging.version import Version
    assert probe.stdout.strip() == Version(manifest.pinned_version("triton_ascend")).base_version


def test_second_run_and_check_mode_change_nothing(first_run):
    for args in (("--tags", "python"), ("--tags", "python", "--check")):
        rc, output, recap = playbook(*args)
        assert rc == 0 and recap["node1"]["changed"] == 0, output[-3000:]


def installer_python(node) -> dict:
    """The installer's Python record in the base environment (the interpreter's pin)."""
    return json.loads(sh(node, "cat /opt/miniconda3/conda-meta/python-*.json").stdout)


def test_the_environment_has_the_installers_python(first_run):
    node, _, _ = first_run
    pinned = installer_python(node)
    env = json.loads(sh(node, f"cat {ENV}/conda-meta/python-{pinned['version']}-{pinned['build']}.json").stdout)
    assert (env["sha256"], env["md5"]) == (pinned["sha256"], pinned["md5"])


def test_the_mirror_serves_a_conda_channel(first_run):
    node, _, _ = first_run
    pinned = installer_python(node)
    spec = f"python=={pinned['version']}={pinned['build']}"
    result = sh(node, f"{CONDA} create -n viamirror --override-channels -c {MIRROR}/conda '{spec}' -y")
    assert result.exit_code == 0
    record = json.loads(sh(node, f"cat /opt/miniconda3/envs/viamirror/conda-meta/python-*.json").stdout)
    assert record["channel"].startswith(f"{MIRROR}/conda/") and record["sha256"] == pinned["sha256"]
    sh(node, f"{CONDA} env remove -n viamirror -y")


def test_a_channel_mirror_serving_another_python_file_stops_the_layer(first_run, tmp_path):
    """dapo_conda_channel pointing at a channel whose python record carries the installer's name and another digest:
    the environment is made, and the role's check stops the play naming the digests, before pip runs in it."""
    node, _, _ = first_run
    pinned = installer_python(node)
    repodata = sh(node, "curl -fsS " + MIRROR + "/conda/linux-aarch64/repodata.json").stdout
    data = json.loads(repodata)
    for record in data["packages.conda"].values():
        record["sha256"] = "0" * 64
    channel = "/root/tampered-channel"
    sh(node, f"mkdir -p {channel}/linux-aarch64 {channel}/noarch && "
             f"curl -fsS {MIRROR}/conda/noarch/repodata.json -o {channel}/noarch/repodata.json && "
             f"printf '%s' {shlex.quote(json.dumps(data))} > {channel}/linux-aarch64/repodata.json")
    try:
        rc, output, _ = playbook("--tags", "python", "-e", f"dapo_conda_channel=file://{channel}",
                                 "-e", "stack_env_name=tampered")
        assert rc != 0, output[-3000:]
        assert f"{pinned['version']}-{pinned['build']} has sha256 {'0' * 64}, the installer's has {pinned['sha256']}" \
            in output, output[-3000:]
        assert "Install the lock's pip" not in output
    finally:
        sh(node, f"{CONDA} env remove -n tampered -y; rm -rf {channel}", ok=False)
