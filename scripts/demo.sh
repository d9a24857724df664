#!/usr/bin/env bash
# The main job on the simulated fleet: bootstrap this machine, bring up 2 simulated Ascend nodes, provision them
# with the real ansible-playbook site.yml, audit them, validate and render the DAPO job, then launch it on a real
# Ray cluster over the 2 nodes (the simulated fleet runs the DAPO entry point in its documented dry mode),
# follow it to the end, look at its NPUs and stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_INVENTORY="$PWD/inventory/sim"   # the simulated fleet's inventory, for ansible-playbook and dapo-ops
job=jobs/qwen3-30b-a3b-dapo.yaml
dapo-sim up --nodes "${NODES:-2}"
dapo-sim stage "$job"   # the model config.json and data files on every node, as a real cluster has them
ansible-playbook site.yml
dapo-ops audit
dapo-ops validate "$job" --recipe-from-head
dapo-ops render "$job" -o runs/render/qwen3-30b-a3b-dapo
run=$(dapo-ops launch "$job" --nodes 2 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
for _ in $(seq 60); do
  state=$(dapo-ops status "$run" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["ray_job_status"])')
  case "$state" in SUCCEEDED|FAILED|STOPPED) break ;; esac
  sleep 3
done
dapo-ops logs "$run" | tail -n 5
dapo-ops top "$run" --once   # every NPU of the run's nodes, its step, and the alerts
dapo-ops stop "$run"
dapo-ops runs
echo "demo: done ($run: $state). Inspect with: dapo-sim status; tear down with: dapo-sim down"
