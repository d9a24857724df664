"""`dapo-ops doctor RUN | PATH... [--json] [--since T]` and `dapo-ops doctor explain CODE`."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, json_option
from dapo_ops.cli.output import Output, as_dict
from dapo_ops.errors import DapoError, UsageError

RELATIVE = re.compile(r"^(\d+)\s*([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class DiagnosisFound(DapoError):
    """doctor found a known failure (exit code 1: what was checked failed)."""


def parse_since(text: str | None, now: datetime | None = None) -> datetime | None:
    """An ISO-8601 time (UTC when it names no zone) or a duration back from now: 30m, 2h, 1d."""
    if text is None:
        return None
    relative = RELATIVE.match(text.strip())
    if relative:
        return (now or datetime.now(timezone.utc)) - timedelta(**{UNITS[relative[2]]: int(relative[1])})
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since {text!r}: give an ISO-8601 time (2026-12-01T17:00) or a duration (30m, 2h, 1d)")
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _print_finding(out: Output, finding, title: str) -> None:
    count = f" ({finding.count} lines)" if finding.count > 1 else ""
    out.info(f"{title} {finding.where}: {finding.signature} [{finding.layer}]{count}"
             + (f" at {finding.time}" if finding.time else ""))
    if title == "ROOT CAUSE":
        out.info(f"  {finding.cause}")
    else:
        out.note(f"  {finding.link}" + (f" [{'; '.join(finding.decoded)}]" if finding.decoded else ""))
    for evidence in finding.evidence:
        out.note(f"  {evidence.file}:{evidence.line}  {evidence.text[:240]}")
    if title == "ROOT CAUSE":
        out.success(f"  fix: {finding.fix}")
        if finding.action:
            out.success(f"  run: {finding.action}")


def print_diagnosis(out: Output, diagnosis) -> None:
    out.note(f"doctor: {diagnosis.files} file(s) from {', '.join(diagnosis.nodes)}; {diagnosis.events} known "
             f"line(s), {diagnosis.noise_hidden} of them known noise (hidden)")
    for what, problem in diagnosis.problems.items():
        out.warning(f"not collected ({what}): {problem}")
    for line in diagnosis.audit:
        out.info(f"audit now: {line}")
    if not diagnosis.found:
        out.success("no known failure in these logs")
        return
    if diagnosis.note:
        out.warning(diagnosis.note)
    _print_finding(out, diagnosis.root, "ROOT CAUSE")
    if diagnosis.consequences:
        out.info(f"what followed ({len(diagnosis.consequences)}):")
        for finding in diagnosis.consequences:
            _print_finding(out, finding, " -")


def print_explanation(out: Output, explanation) -> None:
    out.info(explanation.code)
    for line in explanation.decoded:
        out.info(f"  {line}")
    if not explanation.known:
        out.note(f"  {explanation.code} is not in dapo-ops' signatures (dapo_ops/doctor/signatures/)")
    for signature in explanation.signatures:
        out.info(f"  {signature['id']} [{signature['layer']}]: {signature['meaning']}")
        out.success(f"    fix: {signature['fix']}")
        out.note(f"    source: {'; '.join(signature['source'])}")


def _explain(words: tuple[str, ...], as_json: bool) -> None:
    from dapo_ops.doctor.codes import explain
    from dapo_ops.doctor.signatures import default_catalog

    out = Output(as_json)
    explanation = explain(list(words), default_catalog())
    print_explanation(out, explanation)
    out.document(as_dict(explanation))


def collection_minutes(since: datetime | None, now: datetime | None = None) -> int:
    """How far back `doctor RUN` copies plogs: from --since, else the last day."""
    if since is None:
        return 24 * 60
    return max(1, int(((now or datetime.now(timezone.utc)) - since).total_seconds() // 60) + 1)


def _targets(targets: tuple[str, ...], inventory: Path | None, since: datetime | None) -> list[Path]:
    """Paths are read as they are; a single name that is no path is a run id (its collected bundle)."""
    from dapo_ops.launch.records import RUNS_DIR, load_run

    paths = [Path(t) for t in targets]
    if len(paths) == 1 and not paths[0].exists() and "/" not in targets[0]:
        record = load_run(targets[0])
        bundle = record.directory / "doctor"
        from dapo_ops.doctor.collect import collect_run

        collect_run(record, bundle, inventory, minutes=collection_minutes(since))
        return [bundle]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file, directory or run: {', '.join(missing)} (runs are under {RUNS_DIR})")
    return paths


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("targets", nargs=-1, required=True)
@json_option
@inventory_option
@click.option("--since", metavar="T", help="Only events at or after T: ISO-8601 (UTC unless it says) or 30m, 2h, 1d.")
def doctor(targets: tuple[str, ...], as_json: bool, inventory: Path | None, since: str | None) -> None:
    """Find why a run died: the first failing node / rank / NPU, the evidence, the fix.

    \b
    dapo-ops doctor RUN            collect the run's logs from its nodes into runs/launch/RUN/doctor/, diagnose
    dapo-ops doctor PATH...        diagnose log files or a collected bundle, offline
    dapo-ops doctor explain CODE   decode EI0006, 507033, ERR02200, HCCL 11, 0x80E01801

    Exit code 0 when no known failure is found, 1 when one is, 2 for bad input.
    """
    if targets[0] == "explain":
        if since or inventory:
            raise UsageError("doctor explain takes a code only")
        _explain(targets[1:], as_json)
        return
    from dapo_ops.doctor.diagnose import diagnose_paths

    out = Output(as_json)
    start = parse_since(since)
    diagnosis = diagnose_paths(_targets(targets, inventory, start), since=start)
    print_diagnosis(out, diagnosis)
    out.document(as_dict(diagnosis))
    if diagnosis.found:
        root = diagnosis.root
        raise DiagnosisFound(f"doctor: the run failed first on {root.where}: {root.signature}")
