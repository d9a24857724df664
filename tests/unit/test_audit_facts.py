"""Every audit fact, tested by data files: tests/data/facts/<fact>/<case>.yml holds the command, a recorded
output with its exit code, and the expected value (or the expected error)."""

from pathlib import Path

import pytest
import yaml

from dapo_ops.audit.collect import collection_script, split_sections
from dapo_ops.audit.fact import NodeContext, all_facts
from dapo_ops.errors import ParseError

DATA = Path(__file__).parent.parent / "data" / "facts"
CTX = NodeContext(install_path="/usr/local/Ascend", python="/opt/miniconda3/envs/dapo/bin/python",
                  fact_file="/etc/ansible/facts.d/dapo_ops.fact", env_script="/usr/local/Ascend/dapo-ops-env.sh")
CASES = sorted(DATA.glob("*/*.yml"))


def test_every_fact_has_data_files():
    assert set(all_facts()) == {p.name for p in DATA.iterdir() if p.is_dir()}


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fact_case(path):
    case = yaml.safe_load(path.read_text())
    fact = all_facts()[path.parent.name]
    npu = case.get("npu")
    if "command" in case:
        assert fact.command_for(CTX, npu) == case["command"]
    if "error" in case:
        with pytest.raises(ParseError) as err:
            fact.value(case["rc"], case["output"], f"{path.name}")
        assert case["error"] in str(err.value)
        assert path.name in str(err.value)
    else:
        assert fact.value(case["rc"], case["output"], path.name) == case["expected"]


def _run_collection(script: str, prelude: str = "") -> dict[str, tuple[int, str]]:
    import subprocess

    fake = ("npu-smi() { echo \"npu-smi $*\"; return 7; }; "
            "cat() { echo \"cat $*\"; [ \"$1\" != /usr/local/Ascend/nnal/atb/latest/version.info ]; }; ")
    hccn = CTX.install_path + "/driver/tools/hccn_tool"
    result = subprocess.run(["bash", "-c", fake + prelude + script.replace(hccn, "echo hccn")],
                            capture_output=True, text=True)
    return split_sections(result.stdout)


@pytest.mark.parametrize("mktemp", ["works", "fails"])
def test_collection_script_round_trip(mktemp):
    """The markers split a host's combined output back into each fact's exit code and output, whether the Python
    probes ran beside the device tools (from a temporary directory) or, without one, in turn."""
    script = collection_script(CTX, npus=2)
    facts = all_facts()
    per_npu = sum(f.per_npu for f in facts.values())
    prelude = "mktemp() { return 1; }; " if mktemp == "fails" else ""
    sections = _run_collection(script, prelude)
    assert len(sections) == len(facts) + per_npu  # per-NPU facts run once per NPU
    assert sections["npu_smi_info"] == (7, "npu-smi info\n")
    assert sections["board.1"] == (7, "npu-smi info -t board -i 1\n")
    assert sections["link.0"] == (0, "hccn -i 0 -link -g\n")
    assert sections["nnal_info"][0] == 1
    assert sections["python_dists"][0] == 3  # no env python here: the fact's own "absent" code, kept


def test_collection_script_runs_the_python_probes_beside_the_device_tools(tmp_path):
    """The probes that touch no device run while the device tools run (each probe waits to see the last device
    tool's call before it ends: run in turn, it would end first), the device tools still run one at a time in the
    plan's order, and the temporary files are gone after."""
    from dataclasses import replace

    from dapo_ops.audit.collect import planned

    log, python, temp = tmp_path / "log", tmp_path / "python", tmp_path / "tmp"
    python.write_text(f"#!/bin/sh\ni=0\nwhile ! grep -qx 'npu-smi info' {log} && [ $i -lt 50 ]; do sleep 0.1; "
                      f"i=$((i + 1)); done\necho probe-end >> {log}\necho probed\n")
    python.chmod(0o755)
    temp.mkdir()
    ctx = replace(CTX, python=str(python))
    beside = [f.name for f in all_facts().values() if f.beside_tools]
    assert set(beside) == {"python_stack", "python_dists", "import_sweep"}
    sections = _run_collection(collection_script(ctx, npus=2),
                               f"export TMPDIR={temp}; npu-smi() {{ echo \"npu-smi $*\" >> {log}; }}; ")
    device_tools = [fact.command_for(ctx, npu) for fact, npu in planned(2)
                    if not fact.beside_tools and fact.command_for(ctx, npu).startswith("npu-smi")]
    assert len(device_tools) == 3
    assert device_tools[-1] == "npu-smi info"
    assert log.read_text().splitlines() == device_tools + ["probe-end"] * len(beside)
    assert all(sections[name][0] == 0 and sections[name][1].endswith("probed\n") for name in beside)
    assert list(temp.iterdir()) == []
