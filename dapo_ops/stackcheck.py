"""Compare an installed Python stack (as the verify role or the audit sees it) with the manifest (pure)."""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from dapo_ops.manifest import StackManifest


def source_declared_version(manifest: StackManifest, key: str) -> str:
    """The version a source checkout at its pinned commit declares: `declared_version` when the manifest records
    one (verl's verl/version/version at the pinned tag says <release>.dev), else the source's version."""
    source = manifest.source(key)
    return str(source.extra.get("declared_version") or source.version)


def vllm_built_version(manifest: StackManifest) -> str:
    """The version vLLM built from its checkout reports: built with VLLM_TARGET_DEVICE=<target> for no device, its
    setup.py get_vllm_version() appends the local label +<target> ("+empty"). A vLLM without it was built for a
    device (a wheel from the registry, or a build with another VLLM_TARGET_DEVICE), which the pin excludes."""
    version = source_declared_version(manifest, "vllm")
    target = (manifest.source("vllm").extra.get("build_env") or {}).get("VLLM_TARGET_DEVICE")
    return f"{version}+{target}" if target else version


def pinned_python_packages(manifest: StackManifest) -> dict[str, str]:
    """Distribution -> the version the installed distribution must report (compare with version_matches)."""
    return {
        "torch": manifest.pinned_version("torch"),
        "torch_npu": manifest.pinned_version("torch_npu"),
        "vllm": vllm_built_version(manifest),
        "vllm_ascend": source_declared_version(manifest, "vllm_ascend"),
        "verl": source_declared_version(manifest, "verl"),
    }


def version_matches(installed: str | None, pinned: str | None) -> bool:
    """Does an installed distribution's version match a pinned one?

    Both are normalised (PEP 440: "1.2.0.dev" == "1.2.0.dev0") and compared by their public part, so a local
    label is ignored: vLLM built with VLLM_TARGET_DEVICE=empty reports "<version>+empty" (vLLM setup.py
    get_vllm_version() appends it) and matches the pin <version>. A pin that carries a local label itself must
    match exactly. Unparseable versions match only when the strings are equal.
    """
    if installed is None or pinned is None:
        return False
    try:
        have, want = Version(str(installed)), Version(str(pinned))
    except InvalidVersion:
        return str(installed).strip() == str(pinned).strip()
    return have == want if want.local else Version(have.public) == want



def atb_cxx_abi(installed: dict) -> str | None:
    """The C++ ABI NNAL's environment selected: the probe's atb_cxx_abi, else the `cxx_abi_N` suffix of
    ATB_HOME_PATH (the real nnal/atb/set_env.sh exports ATB_HOME_PATH=.../atb/cxx_abi_N and no ATB_CXX_ABI)."""
    abi = installed.get("atb_cxx_abi")
    if abi not in (None, ""):
        return str(abi)
    home = str(installed.get("atb_home_path") or "").rstrip("/")
    tail = home.rsplit("/", 1)[-1]
    if tail.startswith("cxx_abi_") and tail[len("cxx_abi_"):] in ("0", "1"):
        return tail[len("cxx_abi_"):]
    return None


def _off_pin(dist: str, have: str, want: str) -> str:
    """The message for a distribution off its pin; a vLLM of the pinned release without the build's local label
    was built for a device (vllm_built_version)."""
    try:
        same_release = Version(have).public == Version(want).public and Version(want).local is not None
    except InvalidVersion:
        same_release = False
    if dist == "vllm" and same_release:
        target = Version(want).local
        return (f"vllm {have} was built for a device, not with VLLM_TARGET_DEVICE={target} (that build reports "
                f"{want}); reinstall it from its checkout with site.yml")
    return f"{dist} is {have}, the manifest pins {want}"


def python_stack_problems(installed: dict, manifest: StackManifest) -> list[str]:
    """Problems with `installed` ({python, packages, import_errors, torch_cxx11_abi, atb_cxx_abi}); [] = pinned."""
    problems = [f"{module} does not import: {error}" for module, error in sorted((installed.get("import_errors") or {}).items())]
    packages = installed.get("packages") or {}
    for dist, want in pinned_python_packages(manifest).items():
        have = packages.get(dist)
        if have is None:
            problems.append(f"{dist} is not installed (the manifest pins {want})")
        elif not version_matches(have, want):
            problems.append(_off_pin(dist, have, want))
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
    torch_abi, atb_abi = installed.get("torch_cxx11_abi"), atb_cxx_abi(installed)
    if torch_abi is not None and atb_abi not in (None, "") and str(atb_abi) != ("1" if torch_abi else "0"):
        problems.append(f"the environment script sources NNAL with --cxx_abi={atb_abi} but torch "
                        f"{'uses' if torch_abi else 'does not use'} the C++11 ABI")
    return problems
