"""`dapo-ops stack lock` and `dapo-ops stack wheelhouse`: the nodes' locked Python stack."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table
from rich.text import Text

from dapo_ops.cli.options import json_option
from dapo_ops.cli.output import Output, err_console, print_error
from dapo_ops.errors import DapoError, UsageError


@click.group()
def stack() -> None:
    """The nodes' locked Python stack (stack/lock, named by the manifest's `lock:`)."""


def _unverified_notes(items: tuple[str, ...]) -> dict[str, str]:
    notes = {}
    for item in items:
        key, sep, how = item.partition("=")
        if not sep or not how.strip():
            raise UsageError(f"--unverified {item!r}: expected SOURCE=HOW")
        notes[key] = how.strip()
    return notes


@stack.command("lock")
@click.option("--sources", type=click.Path(file_okay=False, path_type=Path),
              help="Directory with checkouts of vLLM, vllm-ascend and verl at their pinned commits (sources.*.dir): "
                   "re-record the layer requirements from them first.")
@click.option("--platform", "platforms", multiple=True, metavar="NAME",
              help="Node platform to resolve (repeatable; default: every platform in force).")
@click.option("--check", "check_only", is_flag=True,
              help="Offline: prove the lock, the manifest and the recorded layer requirements agree (no uv call).")
@click.option("--upgrade", is_flag=True, help="Resolve afresh instead of keeping the locked versions that still fit.")
@click.option("--unverified", multiple=True, metavar="SOURCE=HOW",
              help="Record a layer from a directory that is not a git checkout (its commit cannot be verified); "
                   "HOW says where the file came from and is written in the recorded header.")
@click.option("--lock-dir", type=click.Path(file_okay=False, path_type=Path), help="Lock directory (default: lock.dir).")
@click.option("--manifest", "manifest_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Stack manifest (default: stack/manifest.yml).")
def stack_lock(sources: Path | None, platforms: tuple[str, ...], check_only: bool, upgrade: bool,
               unverified: tuple[str, ...], lock_dir: Path | None, manifest_path: Path | None) -> None:
    """Regenerate the lock with uv and show what changed, or --check it offline."""
    from dapo_ops.manifest import load_manifest
    from dapo_ops.stack import lockgen

    out = Output(False)
    manifest = load_manifest(manifest_path)
    directory = lockgen.lock_dir(manifest, lock_dir)
    if check_only:
        if sources or platforms or upgrade or unverified:
            raise UsageError("--check takes no --sources, --platform, --upgrade or --unverified")
        _check(out, manifest, directory)
        return
    unknown = [p for p in platforms if p not in manifest.lock.platforms]
    if unknown:
        raise UsageError(f"--platform {unknown[0]}: the manifest's lock has {', '.join(manifest.lock.platforms)}")
    notes = _unverified_notes(unverified)
    if notes and not sources:
        raise UsageError("--unverified needs --sources")
    directory.mkdir(parents=True, exist_ok=True)
    out.info(f"wrote {lockgen.write_direct(manifest, directory)}")
    if sources:
        for path in lockgen.record_layers(manifest, sources, directory, notes):
            out.info(f"recorded {path}")
    chosen = list(platforms) or [p.name for p in manifest.lock.platforms.values() if p.in_force]
    for name in chosen:
        _lock_platform(out, manifest, directory, name, upgrade)


def _lock_platform(out: Output, manifest, directory: Path, name: str, upgrade: bool) -> None:
    from dapo_ops.stack import lockgen

    title, rows, not_in_force = lockgen.lock_platform(manifest, directory, name, upgrade)
    table = Table(title=f"{title}, {len(rows)} change(s)", box=box.SIMPLE_HEAD)
    for column in ("change", "package", "was", "now"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    out.console.print(table)
    if not_in_force is not None:
        out.info(f"{name}: the manifest does not put this lock in force yet ({not_in_force})")


def _check(out: Output, manifest, directory: Path) -> None:
    from dapo_ops.stack import lockgen

    report = lockgen.check(manifest, directory)
    for note in report.notes:
        out.note(f"note: {note}")
    for problem in report.problems:
        print_error(problem)
    if not report.ok:
        raise DapoError(f"the lock disagrees in {len(report.problems)} place(s)")
    in_force = [p.file for p in manifest.lock.platforms.values() if p.in_force]
    out.info(f"lock ok: {', '.join(in_force)} {'agrees' if len(in_force) == 1 else 'agree'} with the manifest and "
             "the layer requirements")


@stack.command("wheelhouse")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--platform", "arch", type=click.Choice(["aarch64", "x86_64"]), default="aarch64", show_default=True,
              help="Node platform: its manylinux wheels for the manifest's python.version.")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Lock file (default: the manifest's lock for the platform).")
@click.option("--only", multiple=True, metavar="NAME", help="Only this locked package (repeatable).")
@json_option
def stack_wheelhouse(directory: Path, arch: str, lock_path: Path | None, only: tuple[str, ...], as_json: bool) -> None:
    """Download every locked file for a node platform, sha256-checked, into DIR/files with a PEP 503 index in
    DIR/simple (serve DIR over HTTP, or use file://DIR/simple, as PIP_INDEX_URL). Twice downloads nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dapo_ops.manifest import load_manifest
    from dapo_ops.paths import PROJECT_ROOT
    from dapo_ops.stack import wheelhouse as wh
    from dapo_ops.stack.platform_tags import glibc_max

    out = Output(as_json)
    manifest = load_manifest()
    spec = manifest.lock.platforms.get(arch) if manifest.lock else None
    if lock_path is None:
        if spec is None:
            raise UsageError(f"the manifest names no lock for {arch}; give --lock FILE")
        lock_path = PROJECT_ROOT / manifest.lock.dir / spec.file
    if spec is not None and not spec.in_force:
        out.warning(f"the {arch} lock is not in force ({spec.reason or ''})")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=as_json or not err_console.is_terminal) as bar:
        task = bar.add_task("checking", total=None)
        summary = wh.build(directory, lock_path, arch, manifest.python_version, only,
                           progress=lambda label, done, total: bar.update(task, description=label, completed=done,
                                                                           total=total),
                           glibc=glibc_max(spec.python_platform if spec else None),
                           index_url=manifest.lock.index_url if manifest.lock else None,
                           extra_index_urls=spec.extra_index_urls if spec else ())
    for warning in summary.warnings:
        out.warning(warning)
    for name in summary.replaced:
        out.info(f"replaced {name}: its sha256 is not the lock's")
    out.info(f"{directory}: {summary.files} files, {wh.human_size(summary.bytes)} "
             f"({len(summary.downloaded)} downloaded, {summary.kept} of {summary.packages} packages already there); "
             f"index {directory / 'simple'}")
    out.document(summary.as_dict())


@stack.command("artifacts")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the digests (default: DIR/dapo-artifacts.sha256).")
@json_option
def stack_artifacts(directory: Path, output_path: Path | None, as_json: bool) -> None:
    """Check the vendor installers you downloaded into DIR and record their sha256 for the inventory.

    \b
    Every installer the stack manifest pins must be in DIR under its vendor file name; another version or platform
    of one is refused, and so is a file whose digest the manifest knows and it does not have. When all are there
    and none is refused, their digests are written in sha256sum's format (check them again with `sha256sum -c`);
    name that file in the inventory (docs/inventory-variables.md). Nothing is written otherwise (exit 1)."""
    import os

    from dapo_ops.manifest import load_manifest
    from dapo_ops.model.variables import ARTIFACT_DIGEST_FILE
    from dapo_ops.stack import artifacts
    from dapo_ops.stack.wheelhouse import human_size

    out = Output(as_json)
    manifest = load_manifest()
    output_path = output_path or directory / artifacts.DIGEST_FILE_NAME
    checked, refusals = artifacts.check_directory(
        manifest, directory, on_file=lambda name, size: out.note(f"hashing {name} ({human_size(size)})"))
    table = Table(box=box.SIMPLE, title=f"the pinned installers in {directory}")
    for column in ("artifact", "file", "size", "sha256", ""):
        table.add_column(column)
    for c in checked:
        verdict = (Text(c.problem, style="red") if c.problem else
                   Text("the manifest's digest", style="green") if manifest.artifact(c.key).sha256 else
                   Text("recorded", style="green"))
        table.add_row(c.key, c.file, human_size(c.size) if c.size is not None else "", c.sha256 or "", verdict)
    out.table(table)
    problems = refusals + [f"{c.file}: {c.problem}" for c in checked if c.problem]
    written = None
    if not problems:
        from dapo_ops.files import write_text

        tmp = output_path.with_name(output_path.name + ".tmp")
        write_text(tmp, artifacts.digest_lines({c.file: c.sha256 for c in checked if c.sha256}))
        tmp.replace(output_path)
        written = os.path.abspath(output_path)
        out.info(f"wrote {written}: set {ARTIFACT_DIGEST_FILE}: {written} in the inventory")
    out.document({"directory": str(directory), "written": written, "problems": problems,
                  "artifacts": [{"key": c.key, "file": c.file, "size": c.size, "sha256": c.sha256,
                                 "problem": c.problem} for c in checked]})
    for problem in problems:
        out.info(problem)
    if problems:
        raise DapoError(f"{len(problems)} installer(s) in {directory} cannot be recorded; nothing was written")
