import subprocess
import sys

import pytest

from tests.cli_runner import run_cli
from dapo_ops.cli import main


def run_cli_process(*args):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, needle", [
    (["sim", "up", "--nodes", "0"], "--nodes must be between 1 and 200"),
    (["sim", "up", "--npus-per-node", "17"], "--npus-per-node must be between 1 and 16"),
    (["sim", "up", "--fault", "node9:firmware=7.5.0.1.129"], "no node 'node9'"),
    (["sim", "up", "--fault", "nonsense"], "expected NODE[.npuK]:KNOB"),
    (["sim", "up", "--nodes", "two"], "is not a valid integer"),
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
    assert main(["sim", "--help"]) == 0


def test_python_dash_m_runs_the_same_cli_with_the_same_exit_codes():
    bad = run_cli_process("validate", "/nonexistent/job.yaml")
    assert bad.returncode == 2 and bad.stderr.startswith("dapo-ops: ") and "Traceback" not in bad.stderr
    assert run_cli_process("--version").stdout.startswith("dapo-ops, version ")
