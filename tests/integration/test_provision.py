"""`ansible-playbook site.yml` on a 2-node simulated fleet: the whole pinned stack, idempotent, ordered upgrades."""

import json

import pytest

from dapo_ops.ascend import npu_smi, npu_smi_board, version_files
from dapo_ops.manifest import load_manifest
from dapo_ops.stackcheck import pinned_python_packages, version_matches
from packaging.version import Version

from .ansible_helpers import playbook
from .helpers import sh


def boots(host):
    return json.loads(sh(host, "cat /dev/.dapo-sim/hw.json").stdout)["boots"]


@pytest.fixture(scope="module")
def provisioned(site_fleet):
    """node1 fresh; node2 starts on firmware 7.5.0.1.129 (and its driver 24.1.rc3); one site.yml run (conftest)."""
    return site_fleet.ensure()


def test_full_run_installs_the_pinned_stack_on_both_nodes(provisioned):
    nodes, _, recap = provisioned
    manifest = load_manifest()
    assert set(recap) == set(nodes)  # else the check below holds over an unparsed (empty) recap
    assert all(r["failed"] == 0 and r["unreachable"] == 0 and r["changed"] > 0 for r in recap.values())
    for host in nodes.values():
        driver = version_files.parse_version_info(sh(host, "cat /usr/local/Ascend/driver/version.info").stdout)
        firmware = version_files.parse_version_info(sh(host, "cat /usr/local/Ascend/firmware/version.info").stdout)
        assert (driver["Version"], firmware["Version"]) == (manifest.artifact("driver").version,
                                                            manifest.artifact("firmware").version)
        info = npu_smi.parse_npu_smi_info(sh(host, "npu-smi info").stdout)
        assert info.driver_version == manifest.artifact("driver").version and len(info.chips) == 16
        board = npu_smi_board.parse_npu_smi_board(sh(host, "npu-smi info -t board -i 15").stdout)
        assert (board.firmware_version, board.compatibility) == (manifest.artifact("firmware").version, "OK")
        toolkit = version_files.parse_toolkit_install_info(sh(host, f"cat /usr/local/Ascend/{manifest.artifact('cann_toolkit').version_file}").stdout)
        assert toolkit["version"] == manifest.artifact("cann_toolkit").version
        pip_list = sh(host, "/opt/miniconda3/envs/dapo/bin/pip list --format json").stdout
        installed = {d["name"].replace("-", "_").lower(): d for d in json.loads(pip_list)}
        for dist, version in pinned_python_packages(manifest).items():
            assert version_matches(installed[dist]["version"], version), (dist, installed[dist]["version"], version)
        # what the checkouts declare: verl's verl/version/version (PEP 440 normalised), vLLM's +empty build label
        assert installed["verl"]["version"] == str(Version(manifest.source("verl").extra["declared_version"]))
        assert installed["vllm"]["version"] == manifest.source("vllm").version + "+empty"
        vllm_dir = f"/opt/dapo-ops/src/{manifest.source('vllm').dir}"
        ascend_dir = f"/opt/dapo-ops/src/{manifest.source('vllm_ascend').dir}"
        assert installed["vllm"]["editable_project_location"] == vllm_dir
        assert installed["vllm_ascend"]["editable_project_location"] == ascend_dir
        assert not ascend_dir.startswith(vllm_dir + "/") and not vllm_dir.startswith(ascend_dir + "/")
        fact = json.loads(sh(host, "cat /etc/ansible/facts.d/dapo_ops.fact").stdout)
        assert fact["manifest"] == manifest.name and fact["import_errors"] == {}
        assert fact["packages"]["torch_npu"] == manifest.pinned_version("torch_npu")
        assert fact["packages"]["verl"] == installed["verl"]["version"]
        assert fact["atb_cxx_abi"] == "1" and fact["atb_home_path"].endswith("/atb/cxx_abi_1")
        # NNAL's set_env.sh exports what the real one does: ATB_HOME_PATH=.../cxx_abi_N and no ATB_CXX_ABI
        env = sh(host, "bash -c 'source /usr/local/Ascend/dapo-ops-env.sh && echo \"$ATB_HOME_PATH|${ATB_CXX_ABI-unset}\"'")
        assert env.stdout.strip() == "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1|unset"
        assert sh(host, "ls /opt/dapo-ops/src/vllm-ascend/vllm_ascend/").stdout.count("vllm_ascend_C") == 1


def test_an_inventory_override_of_a_pinned_commit_is_warned_about(provisioned, site_fleet):
    """#26: dapo_source_commits replaced the manifest's commits silently. The simulated git server carries rebuilt
    commits for the pinned tags (`sim/repos.py`), so the simulated inventory overrides all three."""
    manifest = load_manifest()
    for name in ("vllm", "vllm_ascend", "verl"):
        source = manifest.source(name)
        assert (f"WARNING: dapo_source_commits replaces the pinned commit of {source.repo} {source.ref} "
                f"({source.extra['commit']})") in " ".join(site_fleet.output.split())


def test_old_firmware_node_upgrades_firmware_then_driver_with_one_reboot(provisioned):
    nodes, boots_before, _ = provisioned
    log = sh(nodes["node2"], "cat /var/log/ascend_seclog/operation.log").stdout.splitlines()
    upgrades = [line.split()[2:5] for line in log if "--upgrade" in line]
    assert [u[0] for u in upgrades] == ["firmware", "driver"], log
    assert boots(nodes["node2"]) - boots_before["node2"] == 1
    fresh = [line.split()[2:5] for line in sh(nodes["node1"], "cat /var/log/ascend_seclog/operation.log").stdout.splitlines()]
    hdk = [(f[0], f[2]) for f in fresh if f[0] in ("driver", "firmware")]
    assert hdk == [("driver", "--full"), ("firmware", "--full")]
    assert boots(nodes["node1"]) - boots_before["node1"] == 1


def task_results(output, title):
    """The per-host result words (ok, changed, skipping, failed) of the task whose header contains `title`."""
    results, current = {}, False
    for line in output.splitlines():
        if line.startswith("TASK ["):
            current = title in line
        elif current and ": [" in line and line.split(":")[0] in ("ok", "changed", "skipping", "failed", "fatal"):
            results[line.split("[", 1)[1].split("]")[0]] = line.split(":")[0]
    return results


def test_second_run_changes_nothing(provisioned):
    rc, output, recap = playbook()
    assert rc == 0, output[-3000:]
    assert {h: r["changed"] for h, r in recap.items()} == {"node1": 0, "node2": 0}, output[-3000:]
    # the installed verl (the checkout's declared dev version) and vLLM (+empty) match their pins: each step plans
    # against the lock, finds nothing to install and does not rebuild the checkout
    for title in ("Install vLLM editable", "Install vllm-ascend editable", "then verl editable"):
        assert task_results(output, title) == {"node1": "ok", "node2": "ok"}, title


def test_the_audit_of_the_provisioned_fleet_is_clean(provisioned):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json"], capture_output=True,
                            text=True, timeout=300)
    report = json.loads(result.stdout)
    errors = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert result.returncode == 0 and report["summary"]["errors"] == 0, (result.stderr, errors)


def test_one_layer_by_tag(provisioned):
    rc, output, recap = playbook("--tags", "cann", site=True)   # site.yml's own tag selection
    assert rc == 0 and set(recap) == {"node1", "node2"}, output[-2000:]
    assert all(r["changed"] == 0 for r in recap.values()), output[-2000:]
    tasks = [line for line in output.splitlines() if line.startswith("TASK [") and "Validating arguments" not in line]
    roles = {line[len("TASK ["):].split(" :")[0] for line in tasks if " : " in line}
    assert roles == {"validate_inventory", "ascend_cann"}, roles  # the inventory check always runs


def test_validate_takes_the_recipe_from_the_head_nodes_checkout(provisioned):
    import subprocess
    import sys

    from dapo_ops.paths import PROJECT_ROOT

    result = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "validate", "jobs/qwen3-30b-a3b-dapo.yaml",
                             "--recipe-from-head"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_vllm_ascend_built_outside_the_cann_environment_fails_verify_and_is_rebuilt(provisioned):
    """vllm-ascend's custom ops (vllm_ascend_C, which sleep mode needs) are built only with the CANN environment;
    verify imports them, and the vllm role rebuilds a checkout that lacks them."""
    nodes, _, _ = provisioned
    sh(nodes["node1"], "cd /opt/dapo-ops/src/vllm-ascend && env -u ASCEND_HOME_PATH -u ASCEND_TOOLKIT_HOME "
                       "PIP_CONFIG_FILE=/opt/miniconda3/envs/dapo/pip.conf "
                       "/opt/miniconda3/envs/dapo/bin/pip install --no-deps -q -e .", timeout=300)
    assert "vllm_ascend_C" not in sh(nodes["node1"], "ls /opt/dapo-ops/src/vllm-ascend/vllm_ascend/").stdout
    rc, output, _ = playbook("--tags", "verify", "--limit", "node1")
    assert rc != 0 and "vllm_ascend.vllm_ascend_C does not import" in output, output[-3000:]
    rc, output, recap = playbook("--tags", "vllm,verify", "--limit", "node1")
    assert rc == 0, output[-3000:]
    assert task_results(output, "Install vllm-ascend editable") == {"node1": "changed"}


def test_nnal_sourced_with_the_other_cxx_abi_fails_verify(provisioned):
    """The real NNAL set_env.sh says the ABI only in ATB_HOME_PATH (.../cxx_abi_0); verify must still see it."""
    rc, output, _ = playbook("--tags", "cann,verify", "--limit", "node2", "-e", "ascend_cann_cxx_abi=0")
    try:
        assert rc != 0, output[-3000:]
        assert "sources NNAL with --cxx_abi=0 but torch uses the C++11 ABI" in output, output[-3000:]
    finally:
        rc, output, _ = playbook("--tags", "cann,verify", "--limit", "node2")
        assert rc == 0, output[-3000:]


def test_a_moved_tag_is_refused_naming_both_commits(provisioned):
    """The checkout must be at the pinned commit: a tag that names another commit is another source."""
    wrong = "0" * 40
    rc, output, _ = playbook("--tags", "verl", "--limit", "node1", "-e",
                             json.dumps({"dapo_source_commits": {"verl": wrong}}))
    manifest = load_manifest()
    assert rc != 0 and f"tag {manifest.source('verl').ref} is at commit" in output and wrong in output, output[-3000:]


def test_a_stack_broken_after_provisioning_fails_verify_and_the_audit_and_a_rerun_re_pins_it(provisioned, tmp_path):
    """F2, F3, F4 after site.yml: on node1 CANN's libhccl.so goes missing, numpy 2 and another torch_npu build
    come in (as a `pip install` of something else, or vllm-ascend pulling its own torch_npu, would do). verify and
    the audit name each; the python layer re-pins both packages and verify passes again."""
    import subprocess
    import sys

    from dapo_ops.layout import node_layout
    from dapo_ops.manifest import load_manifest
    from dapo_ops.paths import PROJECT_ROOT
    from dapo_sim.wheels import TORCH_NPU_INIT

    from .helpers import put_wheel

    nodes, _, _ = provisioned
    node1 = nodes["node1"]
    pip = node_layout(node1.vars).pip
    lib = "/usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so"
    other_build = TORCH_NPU_INIT.format(version="2.7.1.post9", torch=load_manifest().pinned_version("torch"))
    wheels = [put_wheel(node1, tmp_path, "numpy", "2.2.6"),
              put_wheel(node1, tmp_path, "torch_npu", "2.7.1.post9", init=other_build)]
    # PIP_CONFIG_FILE=/dev/null: past the env's pip.conf, whose constraint (the lock) refuses these versions
    sh(node1, f"mv {lib} {lib}.hidden && PIP_CONFIG_FILE=/dev/null {pip} install -q --no-deps --no-index "
              f"{' '.join(wheels)}", timeout=180)
    try:
        verify_rc, verify_output, _ = playbook("--tags", "verify", "--limit", "node1")
        audited = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json", "--limit", "node1"],
                                 cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    finally:
        sh(node1, f"mv {lib}.hidden {lib}")
        rc, output, recap = playbook("--tags", "python,verify", "--limit", "node1")
    flat = " ".join(verify_output.split())
    assert verify_rc == 2, verify_output[-3000:]
    assert "torch_npu does not import: ImportError: libhccl.so: cannot open shared object file" in flat, flat[-3000:]
    assert "numpy 2.2.6 does not satisfy numpy<2" in flat and "torch_npu is 2.7.1.post9, the manifest pins" in flat
    assert audited.returncode == 1, audited.stderr
    messages = [f["message"] for f in json.loads(audited.stdout)["findings"]]
    assert "torch_npu is 2.7.1.post9, the manifest pins 2.7.1" in messages, messages
    assert any(m.startswith("torch_npu does not import: ImportError: libhccl.so") for m in messages), messages
    assert rc == 0, output[-3000:]  # the re-pin
    assert task_results(output, "Install torch_npu") == {"node1": "changed"}
    versions = json.loads(sh(node1, f"{pip} list --format json").stdout)
    installed = {d["name"].lower().replace("_", "-"): d["version"] for d in versions}
    assert installed["numpy"] != "2.2.6" and installed["torch-npu"] == load_manifest().pinned_version("torch_npu")


def test_vllm_checked_out_inside_vllm_ascend_is_refused_before_any_change(provisioned):
    """F5: the two checkouts in one another break the vllm / vllm_ascend imports; the vllm layer refuses first."""
    nested = "/opt/dapo-ops/src/vllm-ascend/vllm-official"
    rc, output, recap = playbook("--tags", "vllm", "--limit", "node1", "-e", f"vllm_official_dir={nested}")
    flat = " ".join(output.split())
    assert rc == 2 and recap["node1"]["failed"] == 1 and recap["node1"]["changed"] == 0, output[-3000:]
    assert f"vllm_official_dir ({nested}) and vllm_ascend_dir" in flat and "must be separate directories" in flat
    nodes, _, _ = provisioned
    assert sh(nodes["node1"], f"test -e {nested}", ok=False).exit_code == 1
