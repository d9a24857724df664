"""Does an installed version match its pin: the one rule for stackcheck (verify, audit, launch gate) and the roles
(filter dapo_version_matches); and the C++ ABI NNAL's environment selected."""

import importlib.util
import re

import pytest

from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stackcheck import atb_cxx_abi, pinned_python_packages, python_stack_problems, version_matches


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, PROJECT_ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


filters = _load("filter_plugins/dapo_ops.py", "dapo_filters").FilterModule().filters()
probe = _load("roles/verify/files/stack_probe.py", "stack_probe")


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.mark.parametrize("installed, pinned, expected", [
    ("0.7.0.dev0", "0.7.0.dev", True),       # verl's editable install vs its verl/version/version
    ("0.7.0.dev", "0.7.0.dev0", True),
    ("0.11.0+empty", "0.11.0", True),        # vLLM built with VLLM_TARGET_DEVICE=empty
    ("2.7.1+cpu", "2.7.1", True),
    ("0.7.0.dev0", "0.7.0", False),          # the release is not the dev version its checkout declares
    ("0.7.0", "0.7.0.dev", False),
    ("0.10.2", "0.11.0", False),             # a real mismatch
    ("2.7.1.dev20250724", "2.7.1", False),
    ("0.11.0+empty", "0.11.0+cpu", False),   # a pin with a local label must match exactly
    (None, "0.11.0", False),
    ("not a version", "not a version", True),
    ("not a version", "0.11.0", False),
])
def test_version_matches(installed, pinned, expected):
    assert version_matches(installed, pinned) is expected
    # the roles' filter applies the same rule to what dapo_pip_dists reports ({version, editable} or null)
    assert filters["dapo_version_matches"]({"version": installed, "editable": None} if installed else None,
                                           pinned) is expected


def test_the_manifest_pins_sources_by_tag_and_commit(manifest):
    for key in ("vllm", "vllm_ascend", "verl"):
        assert re.fullmatch(r"[0-9a-f]{40}", manifest.source(key).extra["commit"]), key
    verl = manifest.source("verl")
    assert verl.extra["declared_version_file"] == "verl/version/version"
    # what verl's checkout installs as is what the checks expect; the release stays the rules' reference
    assert pinned_python_packages(manifest)["verl"] == verl.extra["declared_version"] != verl.version


def _stack(manifest, **packages):
    pinned = dict(pinned_python_packages(manifest), numpy="1.26.4", ray="2.54.1")
    return {"python": f"{manifest.python_version}.2", "packages": dict(pinned, **packages), "import_errors": {},
            "torch_cxx11_abi": True, "atb_home_path": "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"}


def test_an_editable_verl_and_an_empty_target_vllm_are_the_pinned_stack(manifest):
    declared = manifest.source("verl").extra["declared_version"]
    installed = _stack(manifest, verl=f"{declared}0", vllm=f"{manifest.source('vllm').version}+empty")
    assert python_stack_problems(installed, manifest) == []


def test_the_release_verl_is_not_the_pinned_checkout(manifest):
    problems = python_stack_problems(_stack(manifest, verl=manifest.source("verl").version), manifest)
    assert len(problems) == 1 and problems[0].startswith("verl is "), problems


@pytest.mark.parametrize("environ, expected", [
    ({"ATB_HOME_PATH": "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"}, "1"),
    ({"ATB_HOME_PATH": "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_0/"}, "0"),
    ({"ATB_HOME_PATH": "/opt/nnal/atb/latest/atb/cxx_abi_0", "ATB_CXX_ABI": "1"}, "1"),
    ({"ATB_HOME_PATH": "/usr/local/Ascend/nnal/atb/latest/atb"}, None),
    ({}, None),
])
def test_the_probe_derives_the_abi_from_atb_home_path(environ, expected):
    assert probe.atb_cxx_abi(environ) == expected
    assert atb_cxx_abi({"atb_home_path": environ.get("ATB_HOME_PATH"), "atb_cxx_abi": environ.get("ATB_CXX_ABI")}) \
        == expected


def test_an_nnal_sourced_with_the_other_abi_is_a_problem(manifest):
    """The real set_env.sh exports no ATB_CXX_ABI: the check must fire from ATB_HOME_PATH alone."""
    installed = _stack(manifest)
    installed["atb_home_path"] = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_0"
    problems = python_stack_problems(installed, manifest)
    assert problems == ["the environment script sources NNAL with --cxx_abi=0 but torch uses the C++11 ABI"]


stack_filters = _load("filter_plugins/dapo_stack.py", "dapo_stack_filters").FilterModule().filters()


@pytest.mark.parametrize("key, sep", [("driver", "="), ("firmware", "="), ("cann_toolkit", "="),
                                      ("cann_kernels", "="), ("cann_nnal", " : ")])
def test_the_roles_read_each_installed_version_as_the_audit_does(manifest, key, sep):
    installed = stack_filters["dapo_installed_version"]
    artifacts = manifest.raw["artifacts"]
    text = "".join(f"{k}{sep}{v}\n" for k, v in artifacts[key]["version_info"].items())
    assert installed(text, artifacts, key) == manifest.artifact(key).version
    assert installed(None, artifacts, key) is None  # not installed


def test_a_version_file_that_does_not_parse_fails_the_task_by_its_command(manifest):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="driver/version.info"):
        stack_filters["dapo_installed_version"]("garbage without separators\n", manifest.raw["artifacts"], "driver")
