"""Compare an installed Python stack (as the verify role or the audit sees it) with the manifest (pure)."""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from dapo_ops.manifest import StackManifest


def pinned_python_packages(manifest: StackManifest) -> dict[str, str]:
    """Distribution -> the exact version the manifest pins."""
    return {
        "torch": manifest.pinned_version("torch"),
        "torch_npu": manifest.pinned_version("torch_npu"),
        "vllm": manifest.source("vllm").version,
        "vllm_ascend": manifest.source("vllm_ascend").version,
        "verl": manifest.source("verl").version,
    }


def _same(have: str, want: str) -> bool:
    try:
        return Version(have).public.split("+")[0] == Version(want).public or Version(have) == Version(want)
    except InvalidVersion:
        return have == want


def python_stack_problems(installed: dict, manifest: StackManifest) -> list[str]:
    """Problems with `installed` ({python, packages, import_errors, torch_cxx11_abi, atb_cxx_abi}); [] = pinned."""
    problems = [f"{module} does not import: {error}" for module, error in sorted((installed.get("import_errors") or {}).items())]
    packages = installed.get("packages") or {}
    for dist, want in pinned_python_packages(manifest).items():
        have = packages.get(dist)
        if have is None:
            problems.append(f"{dist} is not installed (the manifest pins {want})")
        elif not _same(have, want):
            problems.append(f"{dist} is {have}, the manifest pins {want}")
    numpy_spec = manifest.packages.get("numpy", "")
    numpy = packages.get("numpy")
    if numpy_spec and numpy is not None:
        try:
            if not SpecifierSet(numpy_spec).contains(numpy, prereleases=True):
                problems.append(f"numpy {numpy} does not satisfy numpy{numpy_spec}")
        except (InvalidSpecifier, InvalidVersion):
            problems.append(f"numpy {numpy} cannot be compared with numpy{numpy_spec}")
    python = installed.get("python")
    if python is not None and not str(python).startswith(manifest.python_version + "."):
        problems.append(f"python {python} is not {manifest.python_version}")
    torch_abi, atb_abi = installed.get("torch_cxx11_abi"), installed.get("atb_cxx_abi")
    if torch_abi is not None and atb_abi not in (None, "") and str(atb_abi) != ("1" if torch_abi else "0"):
        problems.append(f"the environment script sources NNAL with --cxx_abi={atb_abi} but torch "
                        f"{'uses' if torch_abi else 'does not use'} the C++11 ABI")
    return problems
