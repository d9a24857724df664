import subprocess
import sys
from pathlib import Path

from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.recap import parse_recap

PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def playbook(*args, extra_inventory: Path | None = None, timeout: float = 900):
    """Run the real ansible-playbook on site.yml from the project root; returns (rc, output, recap of the nodes)."""
    inventories = ["-i", "inventory/sim"] + (["-i", str(extra_inventory)] if extra_inventory else [])
    result = subprocess.run([PLAYBOOK, *inventories, "site.yml", *args], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=timeout)
    output = result.stdout + result.stderr
    recap = {host: counts for host, counts in parse_recap(output).items() if host != "localhost"}
    return result.returncode, output, recap
