#!/usr/bin/env bash
# The simulator's machine: what dapo-ops' simulated fleet and its tests need on a fresh Debian machine (root): system
# packages (sshd, nftables, build tools, Chromium), then the controller install (scripts/install-controller.sh) with
# the test tools. A real controller needs only scripts/install-controller.sh. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# g++ make cmake libnuma-dev: the build tools preflight checks on the simulated nodes (which overlay this /usr);
# nftables: the firewall test's rules inside a node's network namespace; chromium: the report test opens
# report.html headless and takes a screenshot; sudo: nodes brought up with `dapo-sim up --ssh-user NAME` let NAME in
# with sudo only; dpkg-dev: the simulator indexes its repository of the OS packages the nodes lack (dpkg-scanpackages).
packages=(openssh-server openssh-client iproute2 util-linux git curl ca-certificates python3 python3-venv gcc g++ make
          cmake libnuma-dev nftables net-tools shellcheck chromium sudo dpkg-dev)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

exec bash scripts/install-controller.sh
