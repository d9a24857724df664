"""`dapo-ops report RUN | LOGFILE...`: a DAPO run's metrics from verl's logs, as a table, JSON, plots and HTML.

Exit codes: 0 the report was written (metrics the log lacks are named, not fatal: a dry run logs no perf
metrics); 1 the logs hold no verl step line at all, or fetching them failed; 2 bad input (a missing file, an
unknown run or baseline)."""

from __future__ import annotations

from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, json_option, require_positive
from dapo_ops.cli.output import Output
from dapo_ops.errors import DapoError, UsageError

DEFAULT_OUT = Path("dapo-report")


class Sources:
    """What the report reads: local log files, or a run whose logs are fetched into its report directory."""

    def __init__(self, args: tuple[str, ...], inventory: Path | None, out: Output):
        from dapo_ops.launch.records import RUNS_DIR, load_run, run_inventory

        self.record, self.inventory, self.out, self.npus, self.reads = None, None, out, None, 0
        self.paths = [Path(a) for a in args]
        self.fill_from = None
        if len(args) == 1 and not self.paths[0].is_file() and (RUNS_DIR / args[0] / "run.json").is_file():
            from dapo_ops.inventory import load_inventory

            self.record = load_run(args[0])
            self.inventory = load_inventory(run_inventory(self.record, inventory))
            return
        for path in self.paths:
            if not path.is_file():
                raise UsageError(f"{path}: no such log file or run (see `dapo-ops runs`)")

    @property
    def title(self) -> str:
        return f"run {self.record.run_id}" if self.record else ", ".join(p.name for p in self.paths)

    def default_out(self) -> Path:
        return self.record.directory / "report" if self.record else DEFAULT_OUT

    def load(self, out_dir: Path):
        from dapo_ops.report.outputs import read_logs

        if self.record is not None:
            from dapo_ops.report.fetch import fetch_run_logs

            say = self.out.note if not self.reads else (lambda _: None)   # said once, not at every --follow read
            fetched = fetch_run_logs(self.record, self.inventory, out_dir, say)
            self.paths, self.fill_from, self.npus = [*fetched.earlier, fetched.console], fetched.jsonl, fetched.npus
        self.reads += 1
        return read_logs(self.paths, self.fill_from)

    def hardware(self, given: Path | None):
        """The samples top and watch recorded, reduced for the report (`--hardware FILE`, else a run's own
        hardware.jsonl), with the number of unreadable lines; None when there is no record."""
        from dapo_ops.report.hardware import points
        from dapo_ops.telemetry.recording import FILE_NAME, iter_samples

        path = given or (self.record.directory / FILE_NAME if self.record is not None else None)
        if path is None or (given is None and not path.is_file()):
            return None
        unreadable = 0

        def readable():
            nonlocal unreadable
            for sample in iter_samples(path):
                if sample is None:
                    unreadable += 1
                else:
                    yield sample

        try:
            seen = points(readable())
        except OSError as exc:
            raise UsageError(f"--hardware {path}: {exc.strerror or exc}") from None
        if given is not None and not seen:
            raise UsageError(f"--hardware {path}: no sample in it ({unreadable} unreadable line(s))")
        return seen, unreadable

    def ended(self) -> bool:
        if self.record is None:
            return False
        from dapo_ops.launch.records import load_run
        from dapo_ops.report.fetch import job_ended

        self.record = load_run(self.record.run_id)
        try:
            return job_ended(self.record, self.inventory)
        except DapoError as exc:     # a head that did not answer this time: keep following
            self.out.note(f"report: {exc}")
            return False


def _require_steps(run, sources: Sources) -> None:
    if run.lines == 0 and not run.validation:
        names = ", ".join(str(p) for p in sources.paths)
        raise DapoError(f"no verl step line (`step:N - key:value ...`) in {names}: is `console` (or `file`) in "
                        "trainer.logger, and did the job reach its first step?")


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="RUN | LOGFILE...")
@click.option("--out", type=click.Path(path_type=Path),
              help="Directory for the report (default: runs/launch/RUN/report, or ./dapo-report for log files).")
@click.option("--baseline", metavar="RUN|seed|FILE",
              help="Compare against `seed` (the seed's 1.2 s/step, 12,800 tokens/s on 32 NPUs), a reported run, "
                   "a summary.json or a log file.")
@click.option("--npus", type=int, help="The run's NPU count, when its log has no perf/throughput to infer it from.")
@click.option("--follow", is_flag=True, help="Redraw the table as the run goes, until its job ends (or Ctrl-C).")
@click.option("--interval", type=float, default=30.0, show_default=True, help="Seconds between reads with --follow.")
@click.option("--hardware", "hardware_file", type=click.Path(path_type=Path), metavar="FILE",
              help="NPU samples recorded by `top RUN` or `watch` (a hardware.jsonl; default for RUN: its own), "
                   "plotted under the steps.")
@inventory_option
@json_option
def report(sources: tuple[str, ...], out: Path | None, baseline: str | None, npus: int | None, follow: bool,
           interval: float, hardware_file: Path | None, inventory: Path | None, as_json: bool) -> None:
    """Summarise a DAPO run from verl's step lines: table, summary.json, PNG plots, one HTML page."""
    from dapo_ops.launch.records import RUNS_DIR
    from dapo_ops.report.outputs import resolve_baseline, write_report
    from dapo_ops.report.summary import summarize

    output = Output(as_json)
    require_positive(npus=npus, interval=interval)
    src = Sources(sources, inventory, output)
    out_dir = out or src.default_out()
    base = resolve_baseline(baseline, RUNS_DIR)
    run = _follow(src, out_dir, npus, interval, output) if follow else src.load(out_dir)
    _require_steps(run, src)
    summary = summarize(run, npus or src.npus)
    document = write_report(run, summary, out_dir, src.title, base, src.hardware(hardware_file))
    _show(output, document)


def _follow(src: Sources, out_dir: Path, npus: int | None, interval: float, output: Output):
    from dapo_ops.report.follow import follow
    from dapo_ops.report.summary import summarize
    from dapo_ops.report.table import summary_table

    def render(run):
        return summary_table(summarize(run, npus or src.npus),
                             f"{src.title} (every {interval:g} s; Ctrl-C ends)")

    return follow(lambda: src.load(out_dir), render, src.ended, interval, output.console)


def _show(output: Output, document: dict) -> None:
    from dapo_ops.report.table import comparison_table, summary_table

    summary = document["summary"]
    output.table(summary_table(summary, document["title"]))
    if document["comparison"]:
        output.table(comparison_table(document["comparison"]))
    if summary["missing"]:
        output.warning(f"not logged: {', '.join(summary['missing'])}")
    if summary["steps"]["trained"] == 0:
        output.warning("no step has timing_s/step: no step time, throughput or time split (a dry run?)")
    output.info(f"report: {document['files']['html']}")
    output.document(document)
