"""The simulated fleet behaves like the real upstream packages where the product depends on it: each test pins one
stand-in behaviour to the upstream file it reproduces (issue 10)."""

import pytest


# ------------------------------------------------------------------------------------------------------------------
# The version each stand-in checkout declares, vLLM's transformers 4 requirement, vllm-ascend's custom ops, NNAL's
# environment: built and imported in a scratch venv on a node, against the mirror's stand-ins.

FIDELITY_VENV = "/root/fidelity-venv"


@pytest.fixture(scope="module")
def stand_in_venv(sim):
    """A provisioned 2-node fleet (HDK + CANN, as `sim up --provisioned`) and, on node1, a venv with the mirror's
    pip configuration and the vLLM, vllm-ascend and verl stand-in checkouts at the pinned tags."""
    from dapo_ops.manifest import load_manifest
    from dapo_sim.fleet import FleetSpec

    from .helpers import hosts, sh

    sim.up(FleetSpec(nodes=2, provisioned=True))
    node = hosts()["node1"]
    manifest, base = load_manifest(), node.vars["dapo_git_base_url"]
    index, trusted = node.vars["dapo_pip_index_url"], node.vars["dapo_pip_trusted_host"]
    clones = " && ".join(f"git clone -q --depth 1 -b {s.ref} {base}/{s.repo}.git /root/fidelity-src/{key}"
                         for key, s in manifest.sources.items())
    sh(node, f"rm -rf {FIDELITY_VENV} /root/fidelity-src && python3 -m venv {FIDELITY_VENV} && {clones} && "
             f"printf '[global]\\nindex-url = {index}\\ntrusted-host = {trusted}\\n' > {FIDELITY_VENV}/pip.conf",
       timeout=180)
    venv_sh(node, f"{FIDELITY_VENV}/bin/pip install -q -U setuptools wheel && VLLM_TARGET_DEVICE=empty "
                  f"{FIDELITY_VENV}/bin/pip install -q --no-deps --no-build-isolation -e ./vllm")
    return node, manifest


def venv_sh(node, command, ok=True, timeout=300):
    from .helpers import sh

    return sh(node, f"export PIP_CONFIG_FILE={FIDELITY_VENV}/pip.conf PIP_DISABLE_PIP_VERSION_CHECK=1; "
                    f"cd /root/fidelity-src && {command}", ok=ok, timeout=timeout)


def test_verl_checkout_installs_as_its_version_file_declares(stand_in_venv):
    """volcengine/verl at the pinned tag: verl/version/version holds the declared version (a .dev), setup.py reads
    it, so an editable install reports it PEP 440 normalised (.dev -> .dev0)."""
    from packaging.version import Version

    node, manifest = stand_in_venv
    declared = manifest.source("verl").extra["declared_version"]
    assert venv_sh(node, "cat verl/verl/version/version").stdout.strip() == declared
    venv_sh(node, f"{FIDELITY_VENV}/bin/pip install -q --no-deps --no-build-isolation -e ./verl")
    version = venv_sh(node, f"(cd / && {FIDELITY_VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"verl\"))')")
    assert version.stdout.strip() == str(Version(declared)) != manifest.source("verl").version


def test_vllm_built_for_no_device_reports_the_empty_label(stand_in_venv):
    """vllm-project/vllm setup.py get_vllm_version(): VLLM_TARGET_DEVICE=empty appends '+empty'; any other target
    needs CUDA."""
    node, manifest = stand_in_venv
    failed = venv_sh(node, f"{FIDELITY_VENV}/bin/pip install -q --no-deps --no-build-isolation -e ./vllm", ok=False)
    assert failed.exit_code != 0 and "CUDA_HOME" in failed.stdout + failed.stderr
    venv_sh(node, f"VLLM_TARGET_DEVICE=empty {FIDELITY_VENV}/bin/pip install -q --no-deps --no-build-isolation -e ./vllm")
    version = venv_sh(node, f"(cd / && {FIDELITY_VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm\"))')")
    assert version.stdout.strip() == manifest.source("vllm").version + "+empty"


@pytest.mark.parametrize("transformers, imports", [("4.57.1", True), ("5.0.0", False)])
def test_vllm_does_not_import_next_to_transformers_5(stand_in_venv, transformers, imports):
    """vLLM at the pinned tag supports transformers 4 only (requirements/common.txt `transformers >= 4.56.0`; the
    `< 5` bound came with later releases): next to transformers 5 importing vllm fails."""
    node, _ = stand_in_venv
    fake = f"/root/fake-transformers-{transformers}"
    venv_sh(node, f"mkdir -p {fake}/transformers-{transformers}.dist-info && printf 'Metadata-Version: 2.1\\n"
                  f"Name: transformers\\nVersion: {transformers}\\n' > {fake}/transformers-{transformers}.dist-info/METADATA")
    result = venv_sh(node, f"(cd / && PYTHONPATH={fake} {FIDELITY_VENV}/bin/python -c 'import vllm')", ok=False)
    assert (result.exit_code == 0) is imports, result.stderr
    if not imports:
        assert "ImportError" in result.stderr and f"transformers {transformers}" in result.stderr


def test_vllm_ascend_builds_its_custom_ops_only_in_the_cann_environment(stand_in_venv):
    """vllm-project/vllm-ascend setup.py (CMakeExtension vllm_ascend.vllm_ascend_C, ASCEND_HOME_PATH handed to
    CMake) and vllm_ascend/device_allocator/camem.py (imports it for sleep mode): without the CANN environment
    there is no vllm_ascend_C."""
    node, _ = stand_in_venv
    install = f"{FIDELITY_VENV}/bin/pip install -q --no-deps --no-build-isolation -e ./vllm_ascend"
    probe = f"(cd / && {FIDELITY_VENV}/bin/python -c 'import vllm_ascend.vllm_ascend_C')"
    venv_sh(node, f"env -u ASCEND_HOME_PATH -u ASCEND_TOOLKIT_HOME {install}")
    assert "vllm_ascend_C" not in venv_sh(node, "ls vllm_ascend/vllm_ascend").stdout
    assert venv_sh(node, probe, ok=False).exit_code != 0
    venv_sh(node, f"bash -c 'source /usr/local/Ascend/ascend-toolkit/set_env.sh && {install}'")
    assert "vllm_ascend_C" in venv_sh(node, "ls vllm_ascend/vllm_ascend").stdout
    venv_sh(node, f". /usr/local/Ascend/ascend-toolkit/set_env.sh && {probe}")
    # built, it links CANN's ascendcl (vllm-ascend's CMakeLists.txt), found through the environment only
    unsourced = venv_sh(node, probe, ok=False)
    assert unsourced.exit_code != 0 and "libascendcl.so: cannot open shared object file" in unsourced.stderr


@pytest.mark.parametrize("abi", ["0", "1"])
def test_nnal_set_env_exports_atb_home_path_and_no_abi_variable(stand_in_venv, abi):
    """CANN NNAL nnal/atb/set_env.sh --cxx_abi=N: ATB_HOME_PATH=<install>/nnal/atb/latest/atb/cxx_abi_N, its lib
    on LD_LIBRARY_PATH, no ATB_CXX_ABI (environment dumps from real nodes, vllm-project/vllm-ascend issue #4186)."""
    node, _ = stand_in_venv
    out = venv_sh(node, f"bash -c 'source /usr/local/Ascend/nnal/atb/set_env.sh --cxx_abi={abi} && "
                        "echo \"$ATB_HOME_PATH|${ATB_CXX_ABI-unset}|$LD_LIBRARY_PATH\"'").stdout.strip()
    home, cxx_abi, ld_path = out.split("|")
    assert home == f"/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_{abi}" and cxx_abi == "unset"
    assert ld_path.startswith(f"{home}/lib:")
