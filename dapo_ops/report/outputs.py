"""Reading the logs, choosing the baseline, and writing the report's files: summary.json, summary.txt, every
step's metrics (steps.csv, steps.jsonl), the PNG plots and report.html."""

from __future__ import annotations

import json
from pathlib import Path

from dapo_ops.errors import UsageError
from dapo_ops.files import make_dirs, write_text
from dapo_ops.report.steps import RunMetrics, read_log
from dapo_ops.report.summary import SEED, baseline_from_summary, compare, summarize
from dapo_ops.report.table import as_text

SUMMARY_NAME, TEXT_NAME, HTML_NAME = "summary.json", "summary.txt", "report.html"
STEPS_CSV, STEPS_JSONL = "steps.csv", "steps.jsonl"


def read_logs(paths: list[Path], fill_from: Path | None = None) -> RunMetrics:
    """The console logs (or JSONL files) in the order given, as one run (a resumed run's logs, oldest first);
    `fill_from`, a file-logger JSONL, adds what the console lacks."""
    run = RunMetrics()
    for path in paths:
        try:
            with open(path, "rb") as stream:
                read_log(stream, str(path), run)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if fill_from is not None:
        extra = RunMetrics()
        with open(fill_from, "rb") as stream:
            read_log(stream, str(fill_from), extra)
        run.fill(extra)
        run.sources += extra.sources
    return run


def _summary_file(path: Path, name: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"baseline {path} is unreadable: {exc}") from None
    return baseline_from_summary(data.get("summary", data), name)


def resolve_baseline(value: str | None, runs_dir: Path) -> dict | None:
    """`seed` (the seed post's figures), a summary.json or a log file, or a run id that has been reported (its
    runs/launch/<run>/report/summary.json)."""
    if value is None:
        return None
    if value == "seed":
        return dict(SEED)
    path = Path(value)
    if path.is_file():
        if path.suffix == ".json":
            return _summary_file(path, path.parent.name or value)
        return baseline_from_summary(summarize(read_logs([path])), path.name)
    reported = runs_dir / value / "report" / SUMMARY_NAME
    if reported.is_file():
        return _summary_file(reported, value)
    if (runs_dir / value).is_dir():
        raise UsageError(f"baseline run {value} has no report yet: run `dapo-ops report {value}` first")
    raise UsageError(f"baseline {value!r} is neither `seed`, a file, nor a run (see `dapo-ops runs`)")


def write_report(run: RunMetrics, summary: dict, out: Path, title: str, baseline: dict | None,
                 hardware: tuple[list, int] | None = None) -> dict:
    """Writes every file of the report into `out`; returns the summary document with every step's metrics under
    "steps" (what --json prints; summary.json leaves the steps to steps.jsonl). `hardware`: the run's recorded
    samples and how many lines were unreadable (dapo_ops/telemetry/recording.py), which add the hardware section."""
    from dapo_ops.report.html import page
    from dapo_ops.report.plots import draw_all
    from dapo_ops.report.step_table import step_records, steps_csv, steps_jsonl

    comparison = compare(summary, baseline) if baseline else None
    make_dirs(out)
    plots = draw_all(run, out, baseline)
    if hardware is not None and hardware[0]:
        from dapo_ops.report.hardware import section
        from dapo_ops.report.plots import hardware_plot

        summary = dict(summary, hardware=section(run, *hardware))
        plots["hardware"] = hardware_plot(hardware[0], summary["hardware"], out / "hardware.png")
    files = {"summary": out / SUMMARY_NAME, "text": out / TEXT_NAME, "html": out / HTML_NAME,
             "steps_csv": out / STEPS_CSV, "steps_jsonl": out / STEPS_JSONL, **plots}
    document = {"title": title, "summary": summary, "comparison": comparison,
                "files": {name: str(path) for name, path in files.items()}}
    write_text(files["summary"], json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    write_text(files["steps_csv"], steps_csv(run))
    write_text(files["steps_jsonl"], steps_jsonl(run))
    write_text(files["text"], as_text(summary, comparison))
    write_text(files["html"], page(title, summary, plots, comparison))
    return {**document, "steps": step_records(run)}
