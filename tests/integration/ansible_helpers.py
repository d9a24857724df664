import subprocess
import sys
from pathlib import Path

import yaml

from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.recap import parse_recap

PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def _play_tags(play: dict) -> set[str]:
    tags = set(play.get("tags") or [])
    for role in play.get("roles") or []:
        tags |= set(role.get("tags") or []) if isinstance(role, dict) else set()
    return tags


def layer_playbooks(tags: set[str]) -> list[str]:
    """The playbooks site.yml imports whose plays carry one of the tags, with the `always` ones (the inventory
    check), in site.yml's order: what `site.yml --tags` runs, without the other layers' plays (each play still
    checks its role's arguments, about 0.4 CPU-s per host)."""
    chosen, found = [], set()
    for entry in yaml.safe_load((PROJECT_ROOT / "site.yml").read_text()):
        path = entry["ansible.builtin.import_playbook"]
        play_tags = set().union(*map(_play_tags, yaml.safe_load((PROJECT_ROOT / path).read_text())))
        found |= play_tags
        if "always" in play_tags or play_tags & tags:
            chosen.append(path)
    if not tags <= found:
        raise ValueError(f"no play of site.yml has the tags {sorted(tags - found)}")
    return chosen


def playbook(*args, extra_inventory: Path | None = None, timeout: float = 900, site: bool = False):
    """Run the real ansible-playbook from the project root; returns (rc, output, recap of the nodes). Without
    `--tags`, or with site=True, it runs site.yml; `--tags A,B` runs the playbooks of those layers instead
    (layer_playbooks), as docs/provisioning.md shows a user running one layer."""
    inventories = ["-i", "inventory/sim"] + (["-i", str(extra_inventory)] if extra_inventory else [])
    args = list(args)
    playbooks = ["site.yml"]
    if "--tags" in args and not site:
        at = args.index("--tags")
        playbooks = layer_playbooks(set(args[at + 1].split(",")))
        del args[at:at + 2]
    result = subprocess.run([PLAYBOOK, *inventories, *playbooks, *args], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=timeout)
    output = result.stdout + result.stderr
    recap = {host: counts for host, counts in parse_recap(output).items() if host != "localhost"}
    return result.returncode, output, recap
