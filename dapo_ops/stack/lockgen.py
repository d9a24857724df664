"""Regenerate the lock (stack/lock) with uv, and read what `--check` compares. The file system, git and uv live
here; what is compared lives in dapo_ops.stack.lock (pure)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.manifest import StackManifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stack.lock import Resolution, layer_content, render_direct_in, render_layer_input, stamp_resolution
from dapo_ops.stack.lockcheck import CheckReport, check_lock

UV_TIMEOUT = 600


def lock_dir(manifest: StackManifest, override: Path | None = None) -> Path:
    if manifest.lock is None:
        raise UsageError("the stack manifest has no `lock:` section")
    return override if override is not None else PROJECT_ROOT / manifest.lock.dir


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def check(manifest: StackManifest, directory: Path) -> CheckReport:
    """`dapo-ops stack lock --check`: offline, reads the lock dir only."""
    config = manifest.lock
    locks = {p.name: (str(directory / p.file), _read(directory / p.file))
             for p in config.platforms.values() if p.in_force}
    inputs = {layer.file: (str(directory / layer.file), _read(directory / layer.file)) for layer in config.inputs}
    direct = (str(directory / config.direct), _read(directory / config.direct))
    return check_lock(manifest, locks, inputs, direct)


def _git_head(checkout: Path) -> str:
    try:
        result = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run git in {checkout}: {exc}") from None
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["git rev-parse failed"])[-1]
        raise UsageError(f"{checkout} is not a git checkout ({why}); clone the source at its pinned tag or pass "
                         "--unverified SOURCE=HOW")
    return result.stdout.strip()


def _git_origin(checkout: Path) -> str | None:
    """The checkout's origin URL (where its commit was read from), if it has one."""
    try:
        result = subprocess.run(["git", "-C", str(checkout), "remote", "get-url", "origin"], capture_output=True,
                                text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = result.stdout.strip()
    return url if result.returncode == 0 and url and not any(ord(c) < 32 for c in url) else None


def record_layers(manifest: StackManifest, sources: Path, directory: Path,
                  unverified: dict[str, str]) -> list[str]:
    """Read each layer's requirements from its checkout under `sources` (sources.<key>.dir, as the provisioning
    roles clone them), check the checkout's HEAD is the manifest's commit, and record them in the lock dir."""
    config = manifest.lock
    for key in unverified:
        if key not in config.layers:
            raise UsageError(f"--unverified {key}: not a layer of the lock ({', '.join(config.layers)})")
    written = []
    heads: dict[str, str] = {}
    for layer in config.inputs:
        key, path = layer.source, layer.path
        source = manifest.source(key)
        commit = str(source.extra.get("commit") or "")
        checkout = sources / source.dir
        if not checkout.is_dir():
            raise UsageError(f"{checkout}: no checkout of {source.repo} (expected sources.{key}.dir under --sources)")
        if key in unverified:
            verified = f"no ({unverified[key]})"
        else:
            head = heads.setdefault(key, _git_head(checkout))
            if head != commit:
                raise UsageError(f"{checkout}: HEAD is {head}, the manifest pins {source.repo} {source.ref} at "
                                 f"{commit}")
            origin = _git_origin(checkout)
            verified = f"yes (checkout HEAD, from {origin})" if origin else "yes (checkout HEAD)"
        text = _read(checkout / path)
        if text is None:
            raise UsageError(f"{checkout / path}: missing in the {source.repo} checkout")
        target = directory / layer.file
        content = layer_content(path, text, str(checkout / path), config.build_exclude.get(key))
        target.write_text(render_layer_input(source.repo, source.ref, commit, path, content, verified))
        written.append(str(target))
    return written


def uv_bin() -> str:
    try:
        import uv  # the uv distribution (a dapo-ops dependency) ships its binary
        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise UsageError("uv is not installed (pip install dapo-ops's dependencies)") from None
        return found


def uv_command(manifest: StackManifest, platform: str, output: str, upgrade: bool) -> list[str]:
    """The uv call that resolves one platform's lock, run in a copy of the lock dir (relative paths, so the
    annotations in the lock name the input files)."""
    config = manifest.lock
    spec = config.platforms[platform]
    command = [uv_bin(), "pip", "compile", config.direct, *(layer.file for layer in config.inputs),
               "--python-platform", spec.python_platform, "--python-version", manifest.python_version,
               "--generate-hashes", "--no-config", "--index-url", config.index_url,
               "--custom-compile-command", "dapo-ops stack lock", "--output-file", output]
    for url in spec.extra_index_urls:
        command += ["--extra-index-url", url]
    command += Resolution.of(config).uv_arguments()
    for name in sorted(config.exclude):
        command += ["--no-emit-package", name]
    if upgrade:
        command.append("--upgrade")
    return command


def compile_lock(manifest: StackManifest, platform: str, directory: Path, upgrade: bool = False) -> str:
    """Resolve one platform with uv; returns the new lock text (the file in `directory` is left alone). The
    current lock is given to uv as the output file, so pins that still fit are kept (uv's preference)."""
    config = manifest.lock
    spec = config.platforms[platform]
    with tempfile.TemporaryDirectory(prefix="dapo-lock-") as tmp:
        work = Path(tmp)
        for name in [config.direct, *(layer.file for layer in config.inputs)]:
            text = _read(directory / name)
            if text is None:
                raise UsageError(f"{directory / name}: missing (record the layers with --sources DIR)")
            (work / name).write_text(text)
        current = _read(directory / spec.file)
        if current is not None:
            (work / spec.file).write_text(current)
        command = uv_command(manifest, platform, spec.file, upgrade)
        try:
            result = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=UV_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise DapoError(f"uv did not resolve the {platform} lock in {UV_TIMEOUT}s") from None
        if result.returncode != 0:
            detail = " ".join(line.strip() for line in result.stderr.strip().splitlines()[-8:])
            raise DapoError(f"uv could not resolve the {platform} lock: {detail}")
        return stamp_resolution((work / spec.file).read_text(), Resolution.of(config))


def write_direct(manifest: StackManifest, directory: Path) -> Path:
    path = directory / manifest.lock.direct
    path.write_text(render_direct_in(manifest))
    return path


def lock_platform(manifest: StackManifest, directory: Path, platform: str, upgrade: bool) -> tuple[str, list, str | None]:
    """Resolve one platform's lock with uv and write it: (file name, changes as diff_locks rows, why it is not in
    force or None)."""
    from dapo_ops.stack.lock import diff_locks, parse_lock

    spec = manifest.lock.platforms[platform]
    path = directory / spec.file
    old = parse_lock(path.read_text(), str(path)) if path.exists() else {}
    text = compile_lock(manifest, platform, directory, upgrade)
    new = parse_lock(text, f"new {spec.file}")
    path.write_text(text)
    return f"{spec.file}: {len(new)} packages", diff_locks(old, new), None if spec.in_force else spec.reason or ""
