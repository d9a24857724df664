"""`dapo-sim`: its own command, with dapo-ops' error handling (one line, exit 2 for bad input)."""
import subprocess
import sys

import pytest

from dapo_sim.cli import main
from tests.cli_runner import run_cli


@pytest.mark.parametrize("args, needle", [
    (["up", "--nodes", "0"], "--nodes must be between 1 and 200"),
    (["up", "--npus-per-node", "17"], "--npus-per-node must be between 1 and 16"),
    (["up", "--fault", "node9:firmware=7.5.0.1.129"], "no node 'node9'"),
    (["up", "--fault", "nonsense"], "expected NODE[.npuK]:KNOB"),
    (["up", "--nodes", "two"], "is not a valid integer"),
    (["no-such-command"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = run_cli(*args, entry=main)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("dapo-sim: ") and needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_help_version_and_python_dash_m():
    assert main(["--help"]) == 0 and main(["--version"]) == 0
    faults = subprocess.run([sys.executable, "-m", "dapo_sim", "faults"], capture_output=True, text=True, timeout=60)
    assert faults.returncode == 0 and "firmware" in faults.stdout


def test_the_product_does_not_import_the_simulator():
    probe = subprocess.run([sys.executable, "-c", "import sys, dapo_ops.cli; "
                            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dapo_sim'))"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout.strip() == "[]"
