#!/usr/bin/env bash
# Rendered by dapo-ops for job qwen3-30b-a3b-dapo: start the Ray head on a2-node01.
set -eo pipefail
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
set -u  # only after the environment: vendor set_env.sh scripts read unset variables
# Root's own commands (install, nft, pgrep, ss, timeout ...) come from the system's directories, not from whatever
# the sourced environment put first; Ray and the job get the environment's PATH back.
job_path=$PATH
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Ray's temp dir lives under a root-only directory (job/render.py RAY_ROOT)
install -d -m 0700 -- /var/lib/dapo-ops/ray
# Where the job writes, made on every node: verl's TaskRunner and workers may run on any of them, and verl's file
# logger creates no directory. Root-only (0700), in directories only root can change: verl's auto-resume loads
# whatever checkpoint it finds there as root (torch.load), so a place another user could fill or redirect is refused.
dapo_refuse_open() {  # DIR: fail, saying why, when another user could change DIR or what leads to it
  local dir=$1 check uid mode real
  check=$dir
  while :; do  # the path as given: a symbolic link on it must be root's (its owner can point it elsewhere)
    if [ -L "$check" ]; then
      uid=$(stat -c '%u' -- "$check")
      if [ "$uid" != 0 ]; then
        printf '%s: %s goes through %s, a symbolic link of uid %s, which another user can point elsewhere: the job would write and load checkpoints there as root\n' \
          "$(hostname)" "$dir" "$check" "$uid" >&2
        return 1
      fi
    fi
    [ "$check" != / ] || break
    check=$(dirname -- "$check")
  done
  real=$(realpath -m -- "$dir")
  check=$real
  while :; do  # where it leads: root's, and not writable by group or others unless sticky (/tmp) above the dir
    if [ -e "$check" ]; then
      read -r uid mode < <(stat -c '%u %a' -- "$check")
      if [ "$uid" != 0 ] || { [ $((8#$mode & 022)) != 0 ] &&
           { [ "$check" = "$real" ] || [ $((8#$mode & 01000)) = 0 ]; }; }; then
        printf '%s: %s is in %s (owner uid %s, mode %s), which another user can write to: the job would write and load checkpoints there as root\n' \
          "$(hostname)" "$dir" "$check" "$uid" "$mode" >&2
        return 1
      fi
    fi
    [ "$check" != / ] || break
    check=$(dirname -- "$check")
  done
}
for dapo_dir in /var/lib/dapo-ops/checkpoints/verl-dapo/qwen3-30b-a3b-dapo /var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo /var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo/tensorboard; do
  dapo_refuse_open "$dapo_dir" || exit 1
  install -d -m 0700 -- "$dapo_dir"
  # again: a directory above it that did not exist before may have been made by another user in between
  dapo_refuse_open "$dapo_dir" || exit 1
done

# The dashboard (and its job API, which runs commands as root) listens on the head's loopback only: every dapo-ops
# call to it runs on the head over SSH. --include-dashboard=true makes a taken dashboard port fail `ray start`
# (without it Ray logs the bind failure and starts without a dashboard, and whoever holds the port gets the token).
# Leftovers from an earlier cluster go first (`ray stop` costs a second even when nothing runs: skip it then).
if pgrep -u 0 -f '[r]aylet|[g]cs_server|[r]ay/dashboard|[r]ay/_private|[r]ay/autoscaler|[r]ay::' >/dev/null; then
  /opt/miniconda3/envs/dapo/bin/ray stop --force >/dev/null 2>&1 || true
fi
# Every Ray port is pinned (dapo_ray_ports); the run's nftables table lets only the run's nodes reach them
# (ray-firewall.nft, removed by `dapo-ops stop`; dapo_ray_firewall: false in the inventory turns it off).
command -v nft >/dev/null ||
  { echo 'nft is not installed on a2-node01: install the nftables package, or set dapo_ray_firewall: false in the inventory' >&2; exit 1; }
nft -f "$(dirname "${BASH_SOURCE[0]}")/ray-firewall.nft"
export DASHBOARD_METRIC_PORT=44227 AUTOSCALER_METRIC_PORT=44217
exec env PATH="$job_path" /opt/miniconda3/envs/dapo/bin/ray start --head --node-ip-address=198.51.100.11 --port=6379 \
  --include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port=8265 \
  --ray-client-server-port=10001 \
  --node-manager-port=6380 --object-manager-port=6381 \
  --dashboard-agent-grpc-port=6382 \
  --dashboard-agent-listen-port=52365 \
  --runtime-env-agent-port=6383 --metrics-export-port=6384 \
  --min-worker-port=10002 --max-worker-port=19999 \
  --resources='{"NPU": 16}' --temp-dir=/var/lib/dapo-ops/ray/tmp --disable-usage-stats
