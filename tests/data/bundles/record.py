"""Record the audit bundles the analysis unit tests read: each host variant's outputs as the collection script
returns them, produced once by the simulator's emulated npu-smi / hccn_tool for that hardware model, plus the
version files and the stack fact of the pinned stack (or of the catalog package the variant names).

Run from the checkout after the manifest's pins or the emulator's output change:
    .venv/bin/python tests/data/bundles/record.py
Each variant is a bundle (dapo_ops.audit.collect.write_bundle) with one host, `node`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dapo_ops.audit.collect import HostRaw, write_bundle
from dapo_ops.manifest import load_manifest
from dapo_sim import hwmodel
from dapo_sim.artifacts import ASSETS, catalog_package
from dapo_ops.stackcheck import pinned_python_packages

HERE = Path(__file__).parent
NPUS = 4

# variant -> (fault knobs, driver version, firmware version, active firmware); None = the pinned one
VARIANTS = {
    "pinned": ((), None, None, None),
    "faults": (("node.npu3:health=Warning", "node.npu1:missing", "node.npu0:link=DOWN", "node.npu2:temp=97"),
               None, None, None),
    "drv-24.1.rc3-fw-7.5.0.1.129": ((), "24.1.rc3", "7.5.0.1.129", None),
    "drv-24.1.rc2-fw-7.3.0.1.231": ((), "24.1.rc2", "7.3.0.1.231", None),
    "pending-fw-7.5.0.1.129": ((), None, None, "7.5.0.1.129"),
    "hot-npu2": (("node.npu2:temp=97",), None, None, None),
    "alarm-npu1-hot-npu2": (("node.npu1:health=Alarm", "node.npu2:temp=97"), None, None, None),
    "warm-npu2-hbm-npu1": (("node.npu2:temp=80", "node.npu1:hbm-used=9000"), None, None, None),
}


def kv(info: dict, sep: str = "=") -> str:
    return "".join(f"{k}{sep}{v}\n" for k, v in info.items())


def record(manifest, workdir: Path, faults, driver, firmware, active_firmware) -> HostRaw:
    hw = hwmodel.build_node_model("node", 1, NPUS, [hwmodel.parse_fault(f) for f in faults], chip_name="910B3",
                                  hbm_mb=65536, factory_firmware="7.1.0.7.220", mcu_version="23.3.13")
    driver_info = catalog_package(manifest, "driver", driver or manifest.artifact("driver").version).version_info
    fw_info = catalog_package(manifest, "firmware", firmware or manifest.artifact("firmware").version).version_info
    hw["driver"]["loaded"] = driver_info["Version"]
    hw["firmware"]["active"] = active_firmware or fw_info["Version"]
    (workdir / "hw").mkdir(parents=True)
    (workdir / "Ascend" / "driver").mkdir(parents=True)
    (workdir / "hw" / "hw.json").write_text(json.dumps(hw))
    (workdir / "Ascend" / "driver" / "version.info").write_text(kv(driver_info))
    env = dict(os.environ, DAPO_SIM_HW_DIR=str(workdir / "hw"), DAPO_SIM_ASCEND=str(workdir / "Ascend"))

    def emu(*args: str) -> tuple[int, str]:
        result = subprocess.run([sys.executable, str(ASSETS / "ascend_emu.py"), *args], capture_output=True,
                                text=True, env=env, check=False)
        return result.returncode, result.stdout

    packages = dict(pinned_python_packages(manifest), numpy="1.26.4")
    record = {"python": manifest.python_version + ".2", "import_errors": {}, "packages": packages}
    probe = {"python": manifest.python_version + ".2", "imports": {}, "versions": packages, "errors": {},
             "torch_cxx11_abi": True, "atb_home_path": "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1",
             "atb_cxx_abi": "1"}
    # the python_stack fact's output: the verify record, the environment script sourced, the live probe
    stack = (f"@@fact-file@@\n{json.dumps(record, indent=4)}\n\n@@env@@ sourced /usr/local/Ascend/dapo-ops-env.sh\n"
             f"{json.dumps(probe)}\n")
    outputs = {"npu_smi_info": emu("npu-smi", "info"), "driver_version": (0, kv(driver_info)),
               "firmware_version": (0, kv(fw_info)),
               "toolkit_info": (0, kv(manifest.artifact("cann_toolkit").version_info)),
               "kernels_info": (0, kv(manifest.artifact("cann_kernels").version_info)),
               "nnal_info": (0, kv(manifest.artifact("cann_nnal").version_info, " : ")),
               "python_stack": (0, stack)}
    for npu in range(NPUS):
        outputs[f"board.{npu}"] = emu("npu-smi", "info", "-t", "board", "-i", str(npu))
        for query in ("link", "net_health", "ip"):
            outputs[f"{query}.{npu}"] = emu("hccn_tool", "-i", str(npu), f"-{query}", "-g")
    return HostRaw("node", NPUS, outputs)


def main() -> None:
    manifest = load_manifest()
    for name, (faults, driver, firmware, active) in VARIANTS.items():
        target = HERE / name
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory() as workdir:
            write_bundle(target, [record(manifest, Path(workdir), faults, driver, firmware, active)])
        print(f"recorded {target}")


if __name__ == "__main__":
    main()
