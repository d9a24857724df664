"""How the per-device findings index and name npu-smi's chips (dapo_ops.audit.npus.Devices), on the recorded
npu-smi tables of tests/data/facts/npu_smi_info (test_audit_analyze.py judges whole hosts)."""

from pathlib import Path

import yaml

from dapo_ops.audit.npus import Devices

FACTS = Path(__file__).parent.parent / "data" / "facts" / "npu_smi_info"


def info(name):
    return yaml.safe_load((FACTS / name).read_text())["expected"]


def test_an_a3_is_counted_and_named_by_device_npu_and_chip():
    devices = Devices.from_npu_smi(info("a3-two-npus.yml"), expected=6)
    assert devices.multi and devices.noun == "devices"
    assert devices.indexes() == [0, 1, 2, 3, 4, 5] and devices.missing() == [4, 5]
    assert devices.busy == {(1, 1)}
    assert devices.label(devices.by_device[3], 3) == "NPU 1 chip 1 (device 3)"
    assert devices.label(None, 5) == "device 5"
    assert devices.npu_id(3) == 1 and devices.npu_id(5) is None  # a missing A3 device's NPU is not known
    assert devices.card(1) == "NPU 1 (devices 2, 3)" and devices.first_device(1) == 2


def test_a_910b_device_is_its_npu():
    devices = Devices.from_npu_smi(info("two-npus.yml"), expected=3)
    assert not devices.multi and devices.noun == "NPUs"
    assert devices.missing() == [2] and devices.npu_id(2) == 2
    chip = devices.by_device[1]
    assert devices.label(chip, 1) == "NPU 1" and devices.label(None, 2) == "NPU 2" and devices.card(1) == "NPU 1"
