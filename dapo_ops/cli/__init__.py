"""The `dapo-ops` command: each command group lives in its own module (parse → call → print); typed errors become
exit codes here, and only here:

0 ok; 1 what was checked or run failed; 2 bad input or usage (nothing changed).
Human output goes through rich (to stderr when --json is given); --json prints one document on stdout.
"""

from __future__ import annotations

import os

import click

from dapo_ops import __version__
from dapo_ops.cli import audit, doctor, job, report, runs, stack, stage, top
from dapo_ops.cli.output import print_error
from dapo_ops.errors import DapoError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dapo-ops")
def cli() -> None:
    """Provision Ascend 910B fleets to a pinned stack, audit them, launch verl DAPO jobs."""


for command in (audit.audit, job.render, job.validate, runs.launch, runs.status, runs.watch, runs.logs, runs.stop,
                runs.runs, report.report, stack.stack, doctor.doctor, stage.stage, top.top):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    return run(cli, "dapo-ops", argv)


def run(group: click.Group, prog: str, argv: list[str] | None = None) -> int:
    """Run a click command group, mapping every error to a one-line message and an exit code (also `dapo-sim`'s)."""
    try:
        group.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.exceptions.Abort:
        print_error(f"{prog}: interrupted")
        return EXIT_FAILED
    except click.ClickException as exc:
        print_error(f"{prog}: {exc.format_message()}")
        return EXIT_USAGE if isinstance(exc, click.UsageError) or exc.exit_code == 2 else EXIT_FAILED
    except DapoError as exc:  # UsageError carries exit code 2, every other DapoError 1
        print_error(f"{prog}: {exc}")
        return EXIT_USAGE if isinstance(exc, UsageError) else exc.exit_code
    except KeyboardInterrupt:
        print_error(f"{prog}: interrupted")
        return EXIT_FAILED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # the one place a bug becomes a one-line message instead of a traceback
        print_error(f"{prog}: internal error: {type(exc).__name__}: {exc} (set DAPO_OPS_DEBUG=1 for the traceback)")
        if os.environ.get("DAPO_OPS_DEBUG") == "1":
            raise
        return EXIT_FAILED
    return EXIT_OK

