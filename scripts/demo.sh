#!/usr/bin/env bash
# The main job on the simulated fleet: bootstrap this machine, bring up 2 simulated Ascend nodes, provision them
# with the real ansible-playbook site.yml, audit them, and validate and render the DAPO job for them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
dapo-ops sim up --nodes "${NODES:-2}"
ansible-playbook site.yml
dapo-ops audit
dapo-ops validate jobs/qwen3-30b-a3b-dapo.yaml --recipe-from-head
dapo-ops render jobs/qwen3-30b-a3b-dapo.yaml -o runs/render/qwen3-30b-a3b-dapo
echo "demo: done. Inspect with: dapo-ops sim status; tear down with: dapo-ops sim down"
