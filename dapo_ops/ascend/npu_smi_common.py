"""Parser of ``npu-smi info -t common -i N``: an NPU's AICore frequency, rated and current, beside its AICore use,
temperature and power (the one npu-smi query that prints the frequency).

Keys, in npu-smi's order (the open CANN driver's npucli ``print_common_info``): ``Memory Usage Rate(%)``, ``HBM
Usage Rate(%)``, ``Aicore Usage Rate(%)``, ``Aicore Freq(MHZ)`` (rated), ``Aicore curFreq(MHZ)`` (now), ``Aicore
Count``, ``Temperature(C)``, ``NPU Real-time Power(W)``, then the MCU's block (``Chip Name : mcu``, its own
``Temperature(C)``). Public 910B samples: 1800 rated, 800 current on an idle NPU (arthurchiao.art, "GPU advanced
notes 2"; MindCluster FaultDiag's log collection guide), so a current frequency under the rated one means
something only under load."""

from __future__ import annotations

from dataclasses import dataclass

from dapo_ops.ascend.where import Where

RATED, CURRENT = "Aicore Freq(MHZ)", "Aicore curFreq(MHZ)"


@dataclass(frozen=True)
class CommonInfo:
    rated_mhz: int
    current_mhz: int
    aicore_pct: int | None
    temp_c: int | None


def parse_npu_smi_common(text: str, command: str = "npu-smi info -t common -i N") -> CommonInfo:
    where = Where(command)
    pairs: dict[str, str] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, colon, value = line.partition(":")
        if not colon:
            where.at(line_no, line).fail("expected 'key : value'")
        key, value = key.strip(), value.strip()
        if key == "Chip Name" and value.lower() == "mcu":
            break   # the MCU's block: its temperature is the board's, not the chip's
        pairs.setdefault(key, value)
    for key in (RATED, CURRENT):
        if key not in pairs:
            where.fail(f"missing {key!r} (not the output of `npu-smi info -t common`?)")

    def optional(key: str) -> int | None:
        value = pairs.get(key)
        return None if value in (None, "NA", "-", "") else where.integer(value, key)

    return CommonInfo(where.integer(pairs[RATED], RATED), where.integer(pairs[CURRENT], CURRENT),
                      optional("Aicore Usage Rate(%)"), optional("Temperature(C)"))
