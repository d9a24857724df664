#!/usr/bin/env bash
# The main job on the simulated fleet: bootstrap this machine, bring up 2 simulated Ascend nodes, and run
# site.yml against them with the real ansible-playbook.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/dapo-ops sim up --nodes "${NODES:-2}"
.venv/bin/ansible-playbook site.yml
echo "demo: done. Inspect with: .venv/bin/dapo-ops sim status; tear down with: .venv/bin/dapo-ops sim down"
