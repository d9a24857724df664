"""`dapo-ops top [RUN]`: every NPU of a run's nodes (or the inventory's) with AICore %, HBM, temperature, power and
health, refreshed in place, with the run's step and the alerts (dapo_ops/telemetry).

Exit codes: 0 sampled (continuous mode: until Ctrl-C); 1 with --once, an error alert was raised or a node gave no
sample; 2 bad input."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, limit_option, require_positive
from dapo_ops.cli.output import Output
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.telemetry.alerts import ERROR, Thresholds
from dapo_ops.telemetry.model import RunProgress

LOG_EVERY = 30.0   # seconds between reads of the run's log (a `ray job logs` on the head each time), in the background


class Source:
    """The nodes to sample, their expected NPU counts, and the run whose progress and record go with them."""

    def __init__(self, run: str | None, inventory: Path | None, limit: str | None):
        from dapo_ops.audit.run import select
        from dapo_ops.inventory import load_inventory

        self.record = self.inventory = None
        if run is not None:
            from dapo_ops.cli.runs import _run_hosts, run_context

            self.record, self.inventory, _ = run_context(run, inventory)
            by_name = _run_hosts(self.record, self.inventory)   # refuses a run whose nodes the inventory lacks
            hosts = [by_name[n] for n in self.record.nodes]
        else:
            hosts = list(load_inventory(inventory).hosts)
        chosen = set(select([h.name for h in hosts], limit))
        self.hosts = [h for h in hosts if h.name in chosen]
        self.expected = {h.name: h.npus for h in self.hosts}
        self.progress = None if self.record is None else RunProgress(self.record.run_id, str(self.record.state),
                                                                     note="reading its log")
        self._stop = threading.Event()
        self.recording = True

    def read_progress(self) -> None:
        """The run's step from its log, read as `report` reads it (its own SSH connections: `ray job logs` on the
        head, the file-logger JSONL)."""
        from dapo_ops.launch.records import load_run
        from dapo_ops.report.progress import run_progress

        record = load_run(self.record.run_id)
        self.progress = run_progress(record, self.inventory, record.directory / "top")

    def follow_progress(self) -> None:
        """Read the run's progress every LOG_EVERY seconds on a thread of its own, so a slow log never holds a
        refresh; stop() ends it."""
        def loop():
            while not self._stop.is_set():
                try:
                    self.read_progress()
                except Exception as exc:   # a read that failed: say so beside the run, try again
                    self.progress = RunProgress(self.record.run_id, "?", note=f"its log could not be read: {exc}")
                self._stop.wait(LOG_EVERY)

        if self.record is not None:
            threading.Thread(target=loop, name="top-run-progress", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def record_path(self) -> Path | None:
        from dapo_ops.telemetry.recording import FILE_NAME

        return None if self.record is None else self.record.directory / FILE_NAME


def _check_textfile(textfile: Path | None) -> None:
    if textfile is None:
        return
    if textfile.is_dir():
        raise UsageError(f"--textfile {textfile} is a directory: name the file (node_exporter reads *.prom)")
    if not textfile.parent.is_dir():
        raise UsageError(f"--textfile {textfile}: no directory {textfile.parent}")
    if not os.access(textfile.parent, os.W_OK):
        raise UsageError(f"--textfile {textfile}: {textfile.parent} is not writable")


@click.command()
@click.argument("run", required=False)
@inventory_option
@limit_option
@click.option("--interval", type=float, default=5.0, show_default=True, help="Seconds between samples.")
@click.option("--once", is_flag=True, help="Take one sample, print it, exit (1 when an error alert is raised).")
@click.option("--json", "as_json", is_flag=True,
              help="JSON: one document with --once, else one document per sample, a line each.")
@click.option("--prometheus", is_flag=True,
              help="MindCluster npu-exporter's metrics (Prometheus text) on stdout, once per sample.")
@click.option("--textfile", type=click.Path(path_type=Path), metavar="FILE",
              help="Write npu-exporter's metrics to FILE at every sample, whole (node_exporter's textfile "
                   "collector reads *.prom).")
@click.option("--throttle-temp", type=int, default=Thresholds.throttle_c, show_default=True, metavar="C",
              help="The temperature alerted as throttling (docs/top.md names the source of the default).")
@click.option("--freq-every", type=int, default=6, show_default=True, metavar="N",
              help="Read the AICore frequency (npu-smi info -t common, one call per NPU) every N-th sample, the first "
                   "included; 0: never.")
@click.option("--record/--no-record", default=True, show_default=True,
              help="With RUN: add each sample to the run's hardware.jsonl, which `report` plots.")
def top(run: str | None, inventory: Path | None, limit: str | None, interval: float, once: bool, as_json: bool,
        prometheus: bool, textfile: Path | None, throttle_temp: int, freq_every: int, record: bool) -> None:
    """Every NPU of RUN's nodes (or the inventory's): AICore, HBM, temperature, power, health, and alerts."""
    from dapo_ops.telemetry.sampler import Sampler
    from dapo_ops.telemetry.series import Window

    require_positive(interval=interval, throttle_temp=throttle_temp)
    if freq_every < 0:
        raise UsageError("--freq-every must be 0 (never) or more")
    if as_json and prometheus:
        raise UsageError("--json and --prometheus each print the sample: choose one")
    _check_textfile(textfile)
    out = Output(as_json or prometheus)
    source = Source(run, inventory, limit)
    window = Window(seconds=max(60.0, 3 * interval), thresholds=Thresholds(throttle_c=throttle_temp))
    recorded = source.record_path() if record else None
    with Sampler(source.hosts, source.expected, freq_every=freq_every) as sampler:
        if once:
            if source.record is not None:
                source.read_progress()
            sample = _take(sampler, window, source, recorded, textfile, out)
            _emit(sample, out, as_json, prometheus, live=None)
            if any(a.severity == ERROR for a in sample.alerts):
                raise DapoError(f"{sum(a.severity == ERROR for a in sample.alerts)} error alert(s): "
                                + "; ".join(a.where + " " + a.code for a in sample.alerts if a.severity == ERROR))
            return
        source.follow_progress()
        try:
            _loop(sampler, window, source, recorded, textfile, interval, out, as_json, prometheus)
        finally:
            source.stop()


def _take(sampler, window, source: Source, recorded: Path | None, textfile: Path | None, out: Output):
    from dapo_ops.telemetry import recording
    from dapo_ops.telemetry.exporter import write_textfile

    nodes = sampler.sample(deadline=time.monotonic() + sampler.timeout)
    sample = window.add(nodes, source.progress)
    if recorded is not None and source.recording:
        try:
            recording.append(recorded, sample)
        except OSError as exc:   # the samples are still shown; only the record stops
            out.warning(f"cannot add to {recorded}: {exc.strerror or exc}; the samples are no longer recorded")
            source.recording = False
    if textfile is not None:
        try:
            write_textfile(textfile, sample)
        except OSError as exc:
            raise DapoError(f"--textfile {textfile}: {exc.strerror or exc}") from None
    return sample


def _emit(sample, out: Output, as_json: bool, prometheus: bool, live) -> None:
    """One sample out: `live` is None for --once, False for the continuous mode off a terminal (a document or a
    table per sample), else the rich Live the table is redrawn in."""
    import json

    from dapo_ops.telemetry import view
    from dapo_ops.telemetry.exporter import exposition

    if as_json:
        click.echo(json.dumps(view.document(sample), sort_keys=True, indent=None if live is False else 2))
    elif prometheus:
        click.echo(exposition(sample), nl=False)
    elif live is not None and live is not False:
        live.update(view.screen(sample, _title(sample, " · Ctrl-C ends")))
    else:
        out.console.print(view.screen(sample, _title(sample, "" if live is None else " · Ctrl-C ends")))
    sys.stdout.flush()


def _title(sample, tail: str) -> str:
    npus = sum(len(n.npus) for n in sample.nodes)
    return f"{time.strftime('%H:%M:%S', time.localtime(sample.at))} · {len(sample.nodes)} node(s), {npus} NPU(s){tail}"


def _loop(sampler, window, source, recorded, textfile, interval, out, as_json, prometheus) -> None:
    from rich.live import Live

    on_screen = not (as_json or prometheus) and out.console.is_terminal
    live = Live(console=out.console, auto_refresh=False, transient=False) if on_screen else None
    try:
        if live is not None:
            live.start()
        while True:
            started = time.monotonic()
            sample = _take(sampler, window, source, recorded, textfile, out)
            _emit(sample, out, as_json, prometheus, live if live is not None else False)
            if live is not None:
                live.refresh()
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
