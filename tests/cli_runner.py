"""Run `dapo-ops` in-process, as a subprocess would see it: its exit code, stdout and stderr (the CLI prints only
through sys.stdout/sys.stderr, which rich and click look up at print time)."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from dapo_ops.cli import main


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, env: dict[str, str] | None = None, cwd=None, entry=main) -> CliResult:
    """`entry` is the command's main (dapo_ops.cli.main, or dapo_sim.cli.main for `dapo-sim`)."""
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            code = entry([str(a) for a in args])
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return CliResult(code, out.getvalue(), err.getvalue())
