import subprocess
import sys

import pytest

from tests.cli_runner import run_cli
from dapo_ops.cli import main


def run_cli_process(*args):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, needle", [
    (["no-such-command"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_version_and_help():
    assert main(["--version"]) == 0
    assert main(["sim", "--help"]) == 2  # the simulator is its own command, dapo-sim


def test_python_dash_m_runs_the_same_cli_with_the_same_exit_codes():
    bad = run_cli_process("validate", "/nonexistent/job.yaml")
    assert bad.returncode == 2 and bad.stderr.startswith("dapo-ops: ") and "Traceback" not in bad.stderr
    assert run_cli_process("--version").stdout.startswith("dapo-ops, version ")


def test_user_text_with_square_brackets_is_shown_literally(tmp_path):
    """rich markup never sees user text: '[/x]' once ended in a MarkupError traceback."""
    weird = tmp_path / "[/x]" / "[bold]job.yaml"
    result = run_cli("validate", str(weird), "-i", "tests/data/inventory/two-nodes")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "[/x]/[bold]job.yaml" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_output_prints_markup_like_text_as_written():
    import io

    from rich.console import Console

    from dapo_ops.cli.output import Output

    out = Output(False)
    out.console = Console(file=io.StringIO(), width=200)
    for say in (out.info, out.success, out.note, out.warning):
        say("job [/data/a.parquet, [red]x[/red]")
    assert out.console.file.getvalue().count("job [/data/a.parquet, [red]x[/red]") == 4
