"""The pinned stack manifest (stack/manifest.yml): typed access for Python; Ansible reads the same file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dapo_ops.ascend.compat import CompatibilityReport, check_compatibility
from dapo_ops.errors import ManifestError
from dapo_ops.paths import STACK_MANIFEST
from dapo_ops.stack.imports import parse_job_imports
from dapo_ops.model.os_packages import parse_os_packages

ARTIFACT_KEYS = ("driver", "firmware", "cann_toolkit", "cann_kernels", "cann_nnal", "conda_installer")
ASCEND_COMPONENTS = ("driver", "firmware", "cann_toolkit", "cann_kernels", "cann_nnal")  # installed, versioned files


@dataclass(frozen=True)
class Artifact:
    key: str
    component: str
    version: str
    file: str
    sha256: str | None                   # None: not known; the site's digest file gives it (stack/artifacts.py)
    version_file: str | None
    version_info: dict[str, str]
    version_key: str | None = None       # which key of version_file holds `version`

    def installed_version(self, info: dict | None) -> str | None:
        """The installed version, from the parsed version_file (None when the file or the key is missing)."""
        if not info or self.version_key is None:
            return None
        value = info.get(self.version_key)
        return None if value is None else str(value)


@dataclass(frozen=True)
class SourceRepo:
    key: str
    repo: str
    ref: str
    version: str
    dir: str
    extra: dict[str, Any]


@dataclass(frozen=True)
class LockPlatform:
    """One node platform's lock (manifest lock.platforms.<name>)."""

    name: str
    file: str
    python_platform: str                 # uv --python-platform
    in_force: bool
    reason: str | None = None            # why a platform is not in force
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockLayer:
    """One recorded layer input: a source's requirements file (or setup.py install_requires) and its copy."""

    source: str                          # key of the manifest's `sources`
    path: str                            # in the source checkout
    file: str                            # the recorded copy, in the lock dir


@dataclass(frozen=True)
class LockConfig:
    """Which lock is in force (manifest `lock:`): where it lives, its inputs and its platforms."""

    dir: str                             # relative to the project root
    index_url: str
    direct: str                          # the input file generated from the manifest
    layers: dict[str, tuple[str, ...]]   # source key (manifest `sources`) -> requirements paths in its checkout
    exclude: dict[str, str]              # distribution -> why it is left out of the lock
    platforms: dict[str, LockPlatform]
    # source key -> {build requirement name -> why its pyproject.toml requirement is not locked nor installed}
    build_exclude: dict[str, dict[str, str]] = field(default_factory=dict)
    # The resolution window: candidates uploaded before this RFC 3339 UTC instant only (uv --exclude-newer)
    exclude_newer: str | None = None
    # package -> (instant, why): a pin allowed to step outside the window (uv --exclude-newer-package)
    exclude_newer_package: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[LockLayer, ...]:
        """Every recorded layer input: <source>.in for a source's first path, <source>-<stem>.in for the others."""
        out = []
        for key, paths in self.layers.items():
            for index, path in enumerate(paths):
                name = f"{key}.in" if index == 0 else f"{key}-{Path(path).stem}.in"
                out.append(LockLayer(source=key, path=path, file=name))
        return tuple(out)


@dataclass(frozen=True)
class StackManifest:
    name: str
    platform: dict[str, Any]
    artifacts: dict[str, Artifact]
    python_version: str
    packages: dict[str, str]
    sources: dict[str, SourceRepo]
    raw: dict[str, Any]
    cann_deps: dict[str, str] = field(default_factory=dict)
    lock: LockConfig | None = None
    job_imports: tuple = ()              # dapo_ops.stack.imports.JobImport, the manifest's job_imports
    os_packages: tuple = ()              # dapo_ops.model.os_packages.OsPackage, the manifest's os_packages

    def vendor_hdk(self) -> tuple[tuple[str, ...], str]:
        """(driver major.minor series the vendor pairs with the pinned CANN, where that pairing is written)."""
        data = self.raw.get("vendor_hdk") or {}
        return tuple(str(s) for s in data.get("series") or ()), str(data.get("source") or "")

    def artifact(self, key: str) -> Artifact:
        try:
            return self.artifacts[key]
        except KeyError:
            raise ManifestError(f"stack manifest has no artifact {key!r}") from None

    def source(self, key: str) -> SourceRepo:
        try:
            return self.sources[key]
        except KeyError:
            raise ManifestError(f"stack manifest has no source {key!r}") from None

    def pins(self) -> dict[str, str]:
        """Component -> the version the audit expects: the Ascend packages (ASCEND_COMPONENTS), then the Python
        distributions (compare those with stackcheck.version_matches)."""
        from dapo_ops.stackcheck import pinned_python_packages

        return {key: self.artifact(key).version for key in ASCEND_COMPONENTS} | pinned_python_packages(self)

    def pinned_version(self, package: str) -> str:
        """'==X.Y.Z' -> 'X.Y.Z' for exact pins."""
        spec = self.packages.get(package, "")
        if not spec.startswith("=="):
            raise ManifestError(f"stack manifest does not pin {package} exactly (found {spec!r})")
        return spec[2:]

    def pinned_compatibility(self) -> CompatibilityReport:
        """The pinned driver / firmware / toolkit must agree with each other."""
        return check_compatibility(self.artifact("driver").version_info, self.artifact("firmware").version_info,
                                   self.artifact("cann_toolkit").version_info)


def is_sha256(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _require(mapping: Any, key: str, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping or mapping[key] in (None, ""):
        raise ManifestError(f"stack manifest: {where}.{key} is missing")
    return mapping[key]


def _lock_platform(name: str, item: Any, source: str) -> LockPlatform:
    at = f"lock.platforms.{name}"
    in_force = item.get("in_force", True) if isinstance(item, dict) else True
    if not isinstance(in_force, bool):
        raise ManifestError(f"{source}: {at}.in_force must be true or false")
    urls = item.get("extra_index_urls") or []
    if not isinstance(urls, list):
        raise ManifestError(f"{source}: {at}.extra_index_urls must be a list")
    platform = LockPlatform(name=name, file=str(_require(item, "file", at)),
                            python_platform=str(_require(item, "python_platform", at)), in_force=in_force,
                            reason=str(item["reason"]) if item.get("reason") else None,
                            extra_index_urls=tuple(str(u) for u in urls))
    if not in_force and not platform.reason:
        raise ManifestError(f"{source}: {at} is not in force but gives no reason")
    return platform


def _lock_layers(data: Any, sources: dict[str, SourceRepo], source: str) -> dict[str, tuple[str, ...]]:
    layers = _require(data, "layers", "lock")
    if not isinstance(layers, dict):
        raise ManifestError(f"{source}: lock.layers must be a mapping")
    for key, paths in layers.items():
        if key not in sources:
            raise ManifestError(f"{source}: lock.layers.{key} names no entry of sources")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise ManifestError(f"{source}: lock.layers.{key} must be a list of paths in the checkout")
    return {str(k): tuple(v) for k, v in layers.items()}


def _reasons(value: Any) -> bool:
    """A mapping of package -> a non-empty reason."""
    return isinstance(value, dict) and all(isinstance(r, str) and r for r in value.values())


_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def _instant(value: Any, where: str, source: str) -> str:
    """An RFC 3339 UTC instant, written in full (a bare date is read in the local time zone by uv)."""
    text = str(value) if value is not None else ""
    if not _INSTANT.match(text):
        raise ManifestError(f"{source}: {where} must be an RFC 3339 UTC instant like 2026-01-06T00:00:00Z "
                            f"(found {value!r})")
    return text


def _lock_window(data: Any, source: str) -> tuple[str | None, dict[str, tuple[str, str]]]:
    window = data.get("resolution")
    if window is None:
        return None, {}
    if not isinstance(window, dict):
        raise ManifestError(f"{source}: lock.resolution must be a mapping")
    exclude_newer = _instant(window.get("exclude_newer"), "lock.resolution.exclude_newer", source)
    packages = window.get("exclude_newer_package") or {}
    if not isinstance(packages, dict):
        raise ManifestError(f"{source}: lock.resolution.exclude_newer_package must map package -> before, why")
    out = {}
    for name, item in packages.items():
        where = f"lock.resolution.exclude_newer_package.{name}"
        if not isinstance(item, dict) or not isinstance(item.get("why"), str) or not item["why"].strip():
            raise ManifestError(f"{source}: {where} needs `before:` and a non-empty `why:`")
        out[str(name)] = (_instant(item.get("before"), f"{where}.before", source), item["why"].strip())
    return exclude_newer, out


def _parse_lock(data: Any, sources: dict[str, SourceRepo], source: str) -> LockConfig:
    raw_platforms = _require(data, "platforms", "lock")
    if not isinstance(raw_platforms, dict):
        raise ManifestError(f"{source}: lock.platforms must be a mapping")
    platforms = {str(name): _lock_platform(str(name), item, source) for name, item in raw_platforms.items()}
    layers = _lock_layers(data, sources, source)
    exclude = data.get("exclude") or {}
    if not isinstance(exclude, dict):
        raise ManifestError(f"{source}: lock.exclude must be a mapping of package -> reason")
    build_exclude = data.get("build_exclude") or {}
    if not isinstance(build_exclude, dict) or not all(k in layers and _reasons(v) for k, v in build_exclude.items()):
        raise ManifestError(f"{source}: lock.build_exclude must map a layer's source to package -> reason")
    exclude_newer, exclude_newer_package = _lock_window(data, source)
    return LockConfig(dir=str(_require(data, "dir", "lock")), index_url=str(_require(data, "index_url", "lock")),
                      direct=str(_require(data, "direct", "lock")), layers=layers,
                      exclude_newer=exclude_newer, exclude_newer_package=exclude_newer_package,
                      exclude={str(k): str(v) for k, v in exclude.items()}, platforms=platforms,
                      build_exclude={str(k): {str(n): str(r) for n, r in v.items()}
                                     for k, v in build_exclude.items()})


def parse_manifest(data: Any, source: str = "stack manifest") -> StackManifest:
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: top level must be a mapping")
    if data.get("schema") != 1:
        raise ManifestError(f"{source}: unsupported schema {data.get('schema')!r} (expected 1)")
    artifacts: dict[str, Artifact] = {}
    raw_artifacts = _require(data, "artifacts", "")
    for key in ARTIFACT_KEYS:
        item = _require(raw_artifacts, key, "artifacts")
        if not isinstance(item, dict) or "sha256" not in item:
            raise ManifestError(f"stack manifest: artifacts.{key}.sha256 is missing (null where it is not known)")
        sha = None if item["sha256"] is None else str(item["sha256"])
        if sha is not None and not is_sha256(sha):
            raise ManifestError(f"{source}: artifacts.{key}.sha256 is not a sha256 hex digest")
        artifacts[key] = Artifact(
            key=key,
            component=str(_require(item, "component", f"artifacts.{key}")),
            version=str(_require(item, "version", f"artifacts.{key}")),
            file=str(_require(item, "file", f"artifacts.{key}")),
            sha256=sha,
            version_file=item.get("version_file"),
            version_info={str(k): str(v) for k, v in (item.get("version_info") or {}).items()},
            version_key=_version_key(item, key, source),
        )
    python = _require(data, "python", "")
    sources = {}
    for key, item in (_require(data, "sources", "") or {}).items():
        extra = {k: v for k, v in item.items() if k not in ("repo", "ref", "version", "dir")}
        sources[key] = SourceRepo(key, str(_require(item, "repo", f"sources.{key}")),
                                  str(_require(item, "ref", f"sources.{key}")),
                                  str(_require(item, "version", f"sources.{key}")),
                                  str(_require(item, "dir", f"sources.{key}")), extra)
    return StackManifest(
        name=str(_require(data, "name", "")),
        platform=dict(_require(data, "platform", "")),
        artifacts=artifacts,
        python_version=str(_require(python, "version", "python")),
        packages={str(k): str(v) for k, v in (_require(python, "packages", "python") or {}).items()},
        sources=sources,
        raw=data,
        cann_deps={str(k): str(v) for k, v in (python.get("cann_deps") or {}).items()},
        lock=_parse_lock(data["lock"], sources, source) if data.get("lock") is not None else None,
        job_imports=parse_job_imports(data.get("job_imports"), set(sources), source),
        os_packages=parse_os_packages(data.get("os_packages"), source),
    )


def _version_key(item: dict, key: str, source: str) -> str | None:
    version_key = item.get("version_key")
    if key in ASCEND_COMPONENTS and not version_key:
        raise ManifestError(f"{source}: artifacts.{key} has a version_file but no version_key")
    if version_key is not None and str(version_key) not in (item.get("version_info") or {}):
        raise ManifestError(f"{source}: artifacts.{key}.version_key {version_key!r} is not a key of its version_info")
    return None if version_key is None else str(version_key)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml's, where PyYAML was built with it: 10x faster


def load_manifest(path: Path | str | None = None) -> StackManifest:
    path = Path(path) if path else STACK_MANIFEST
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"cannot read stack manifest {path}: {exc.strerror}") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise ManifestError(f"stack manifest {path} is not valid YAML: {exc}") from None
    return parse_manifest(data, str(path))
