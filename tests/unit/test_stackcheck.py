import pytest

from dapo_ops.manifest import load_manifest
from dapo_ops.stackcheck import pinned_python_packages, python_stack_problems


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.fixture
def pinned(manifest):
    packages = dict(pinned_python_packages(manifest), numpy="1.26.4", ray="2.54.1")
    return {"python": f"{manifest.python_version}.2", "packages": packages, "import_errors": {},
            "torch_cxx11_abi": True, "atb_cxx_abi": "1"}


def test_the_pinned_stack_has_no_problems(pinned, manifest):
    assert python_stack_problems(pinned, manifest) == []


def test_local_version_labels_are_the_same_release(pinned, manifest):
    pinned["packages"]["torch"] += "+cpu"
    assert python_stack_problems(pinned, manifest) == []


@pytest.mark.parametrize("change, expected", [
    (lambda s: s["packages"].update(torch_npu="2.7.1.dev20250724"), "torch_npu is 2.7.1.dev20250724, the manifest pins"),
    (lambda s: s["packages"].update(vllm=None), "vllm is not installed"),
    # vLLM's own release from the registry, or a build for a device: no +empty label (F5)
    (lambda s: s["packages"].update(vllm=s["packages"]["vllm"].split("+")[0]),
     "was built for a device, not with VLLM_TARGET_DEVICE=empty (that build reports"),
    (lambda s: s["packages"].update(vllm=s["packages"]["vllm"].split("+")[0] + "+cu129"),
     "was built for a device, not with VLLM_TARGET_DEVICE=empty"),
    (lambda s: s["packages"].update(numpy="2.0.2"), "numpy 2.0.2 does not satisfy numpy<2"),
    (lambda s: s.update(python="3.12.1"), "python 3.12.1 is not"),
    (lambda s: s.update(atb_cxx_abi="0"), "--cxx_abi=0 but torch uses the C++11 ABI"),
    (lambda s: s["import_errors"].update(torch_npu="ImportError: libhccl.so"), "torch_npu does not import: ImportError"),
])
def test_each_drift_is_named(pinned, manifest, change, expected):
    change(pinned)
    problems = python_stack_problems(pinned, manifest)
    assert len(problems) == 1 and expected in problems[0], problems
