"""Every spec of the corpus (tests/data/jobs, written by make_corpus.py) gets its exit code from `dapo-ops
validate`, and a refusal is one line naming the field and the problem, never a traceback."""

from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli

JOBS = Path(__file__).parents[1] / "data" / "jobs"
INVENTORY = Path(__file__).parents[1] / "data" / "inventory" / "two-nodes"
CASES = yaml.safe_load((JOBS / "cases.yml").read_text())


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 60
    assert len({c["file"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_validate(case, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    result = run_cli("validate", str(JOBS / case["file"]), "-i", str(INVENTORY))
    assert result.returncode == case["exit"], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if case["exit"]:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dapo-ops: "), result.stderr
        # the piece must be the message's own: the line also names the file, which alone must not contain it
        assert case["message"] and case["message"] not in f"dapo-ops: job spec {JOBS / case['file']}:"
        assert case["message"] in lines[0], lines[0]
