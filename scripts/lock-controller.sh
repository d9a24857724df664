#!/usr/bin/env bash
# Regenerate the controller's hashed locks (requirements/), which scripts/install-controller.sh installs with
# --require-hashes: pip checks every file's sha256 before it installs or builds anything.
#   requirements/build-tools.txt  pip, setuptools and wheel, installed first (the rest builds with them)
#   requirements/controller.txt   dapo-ops' dependencies and its test tools (pyproject.toml, extra "test")
#   requirements/verl-config.txt  the pinned verl wheel alone (`dapo-ops validate` reads its configuration)
# Versions are held to those already in .venv (the set the suite passed with), unless --upgrade is given; pip,
# setuptools and wheel, which `pip freeze` leaves out, resolve to their newest.
# Both platforms a controller may be (x86_64, aarch64) are covered: uv resolves universally.
set -euo pipefail
cd "$(dirname "$0")/.."

uv=.venv/bin/uv
held=.venv/held-versions.txt  # a fixed name: uv writes it into the locks' "via" notes
: >"$held"
if [ "${1:-}" != "--upgrade" ]; then
  .venv/bin/python -m pip freeze --exclude-editable | grep -v '^-e ' >"$held"
fi
compile() { "$uv" pip compile --quiet --generate-hashes --universal --python-version 3.11 -c "$held" "$@"; }

compile pyproject.toml --extra test --no-header -o requirements/controller.txt
# held to the controller lock too, so a package both need (packaging) is the same version in both
printf 'pip\nsetuptools>=68\nwheel\n' |
  compile - -c requirements/controller.txt --no-header -o requirements/build-tools.txt
verl_pin=$(.venv/bin/python -c 'from dapo_ops.manifest import load_manifest
print(load_manifest().source("verl").version)')
echo "verl==$verl_pin" | compile - --no-deps --no-header -o requirements/verl-config.txt
echo "lock-controller: requirements/ written ($(grep -c '==' requirements/controller.txt) packages)"
