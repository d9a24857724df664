"""Run the integration tests as groups at once, each with a simulated fleet of its own (CI's integration phase).

Each group is a pytest run inside its own network, mount and PID namespaces (util-linux `unshare`). Nothing in the
product or the simulator knows: the group's namespaces give it its own bridges, node namespaces and addresses
(the same names and addresses as every other group's, which never meet), and bind mounts give it its own
/var/lib/dapo-ops (the simulator's state directory, and HOME: Ansible's SSH control sockets, dapo-ops' inventory
cache) and its own `inventory/sim` and `runs/` in this checkout. The real wheels of the mirror's cache are shared
as hard links (they are only read); the rest of the cache is copied. When a group's pytest ends, its fleet is
brought down, and the end of its PID namespace ends every process it started.

The machine runs the groups' playbooks and Ray starts side by side; what it gains is the time one group waits (for
a job, a reboot, a timeout, an SSH round trip) while the other runs. The modules that share the site.yml-provisioned
fleet (SITE_FLEET_MODULES) are one group, with a few light ones after them; every other module is in the other.

    python -m tests.integration.groups [--only GROUP] [PYTEST ARGS...]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import DEFAULT_STATE_DIR, SIM_INVENTORY_DIR

from . import cpu_usage

HERE = Path(__file__).parent
# The groups' own directories, inside the simulator's state directory, which every node sees empty
# (dapo_sim/node.py init_script's `hide`): a node of one group never sees another group's disks, nor its own.
WORK = DEFAULT_STATE_DIR / "ci-groups"
CACHE = DEFAULT_STATE_DIR / "cache"
# What a group gets of its own, each a bind mount of its directory's entry: the whole of /var/lib/dapo-ops (so the
# simulator's state directory and HOME), this checkout's inventory/sim and runs/ (preflight's reports).
VAR_LIB = DEFAULT_STATE_DIR.parent
RUNS = PROJECT_ROOT / "runs"
# Modules that share one site.yml-provisioned 2-node fleet (conftest's site_fleet), run one after the other so that
# no other module's bring-up comes between them: test_provision first (it asserts on the first run), then test_launch
# and test_resume.
SITE_FLEET_MODULES = ("test_provision.py", "test_launch.py", "test_resume.py")
# Light modules that run after them in their group, to even the two groups out: none since test_resume joined them
# (the site-fleet group took 1358 s beside the other's 1018 s with the five light modules in it).
AFTER_SITE_FLEET: tuple[str, ...] = ()
# Run as PID 1 of the group's namespaces, by bash (which reaps what it did not start): the group's own /run/netns
# (where `ip netns add` names namespaces) and /sys (this network namespace's devices), then the bind mounts. The
# paths come from the environment: the simulator's tests look for its state directory in every command line.
SETUP = """set -euo pipefail
if [ -n "${GROUP_CPU_USAGE:-}" ]; then   # the group's CPU time, read by its conftest (cpu_usage.py)
  exec 9<"$GROUP_CPU_USAGE"
  export DAPO_CI_CPU_FD=9
fi
ip link set lo up
umount --recursive --lazy /run/netns 2>/dev/null || true   # this mount namespace's copy of the host's named ones
mount -t tmpfs tmpfs /run/netns
mount -t sysfs sysfs /sys
mount --bind "$GROUP_DIR/inventory" "$GROUP_INVENTORY"
mount --bind "$GROUP_DIR/runs" "$GROUP_RUNS"
mount --bind "$GROUP_DIR/var-lib" "$GROUP_VAR_LIB"
set +e
"$@"
rc=$?
"$GROUP_PYTHON" -m dapo_sim down >/dev/null 2>&1
exit $rc
"""


def groups() -> dict[str, list[str]]:
    modules = sorted(p.name for p in HERE.glob("test_*.py"))
    site = [m for m in (*SITE_FLEET_MODULES, *AFTER_SITE_FLEET) if m in modules]
    return {"site-fleet": site, "others": [m for m in modules if m not in site]}


def prepare(name: str) -> Path:
    """The group's directory: its /var/lib/dapo-ops (a simulator state directory holding the shared cache, and
    HOME), the simulated inventory's fixed files (`dapo-sim up` writes hosts.yml) and an empty runs/."""
    group_dir = WORK / name
    shutil.rmtree(group_dir, ignore_errors=True)
    state = group_dir / "var-lib" / DEFAULT_STATE_DIR.relative_to(VAR_LIB)
    cache = state / "cache"
    cache.mkdir(parents=True)
    if CACHE.is_dir():
        for entry in CACHE.iterdir():
            if entry.name.startswith("locked-"):   # the real wheels: read, never written once fetched
                subprocess.run(["cp", "-al", str(entry), str(cache / entry.name)], check=True)
            elif entry.is_dir():
                shutil.copytree(entry, cache / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, cache / entry.name)
    state.chmod(0o700)
    (group_dir / "var-lib" / "home").mkdir(mode=0o700)
    shutil.copytree(SIM_INVENTORY_DIR, group_dir / "inventory", ignore=shutil.ignore_patterns("hosts.yml"))
    (group_dir / "runs").mkdir()
    return group_dir


def command(modules: list[str], pytest_args: list[str]) -> list[str]:
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *(str(HERE / m) for m in modules),
              *pytest_args]
    return ["unshare", "--net", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
            "--kill-child=KILL", "bash", "-c", SETUP, "group", *pytest]


def environment(name: str) -> dict[str, str]:
    for mount_point in (SIM_INVENTORY_DIR, RUNS, Path("/run/netns")):
        mount_point.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(VAR_LIB / "home"), GROUP_DIR=str(WORK / name),
               GROUP_INVENTORY=str(SIM_INVENTORY_DIR), GROUP_RUNS=str(RUNS), GROUP_VAR_LIB=str(VAR_LIB),
               GROUP_PYTHON=sys.executable, DAPO_OPS_SIM_GROUP=name, DAPO_OPS_REQUIRE_SIM="1", PY_COLORS="0")
    env.pop("DAPO_OPS_CACHE_DIR", None)
    env.pop("DAPO_OPS_SIM_DIR", None)
    return env


class Group:
    """One group's pytest, started in its namespaces; `unshare --kill-child=KILL` ends the group's PID namespace
    (every process it started) when unshare itself ends, whatever ended it."""

    def __init__(self, name: str, modules: list[str], pytest_args: list[str]):
        self.name, self.modules = name, modules
        self.dir, self.log = WORK / name, WORK / f"{name}.log"
        self.started = time.monotonic()
        self.seconds = 0.0
        self.cpu_seconds: float | None = None
        self.cgroup = cpu_usage.make_cgroup(name)
        env = environment(name)
        if self.cgroup:
            env["GROUP_CPU_USAGE"] = str(self.cgroup[1])
        join = (lambda: cpu_usage.join_cgroup(str(self.cgroup[0]))) if self.cgroup else None
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(command(modules, pytest_args), cwd=PROJECT_ROOT, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=join)

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and not self.seconds:
            self.seconds = time.monotonic() - self.started
            if self.cgroup:
                self.cpu_seconds = cpu_usage.read_seconds(self.cgroup[1])
                cpu_usage.remove_cgroup(self.cgroup[1])
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.poll()


COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def counts(log: str) -> dict[str, int]:
    """pytest's closing line of a group's log, as {"passed": N, "failed": N, ...}; {} when there is none."""
    closing = [line for line in log.splitlines() if re.match(r"^=+ .*\d+ (passed|failed|error).* in [\d.]+s", line)]
    found = {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in COUNTS.findall(
        closing[-1])} if closing else {}
    return found


def fill_cache() -> None:
    """The mirror's downloads, made here: a group's network namespace reaches no package registry."""
    from dapo_ops.manifest import load_manifest
    from dapo_sim import wheels

    manifest, log = load_manifest(), WORK / "cache.log"
    wheels.fetch_locked_files(CACHE / f"locked-{os.uname().machine}", manifest, log)
    wheels.fetch_verl_wheel(CACHE / "wheels", manifest, log)


def report(group: Group, total: dict[str, int]) -> None:
    text = group.log.read_text(errors="replace")
    print(f"\n===== group {group.name} (exit {group.proc.returncode}, {group.seconds:.0f} s) =====\n{text}", flush=True)
    found = counts(text)
    if group.proc.returncode != 0 and not found.get("failed") and not found.get("error"):
        found["failed"] = 1   # a group that failed without pytest saying so (a mount, a signal, no test run)
        print(f"integration: group {group.name} exited {group.proc.returncode} without a failed test in its "
              f"closing line; its log: {group.log}")
    for word, n in found.items():
        total[word] = total.get(word, 0) + n
    if group.proc.returncode == 0:
        shutil.rmtree(group.dir, ignore_errors=True)   # its nodes' disks; a failed group's stay for a look


def run(chosen: dict[str, list[str]], pytest_args: list[str], timeout: float) -> list[Group]:
    started: list[Group] = []
    total: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        for name, modules in chosen.items():
            prepare(name)
            started.append(Group(name, modules, pytest_args))
            print(f"integration: group {name}: {' '.join(modules)}", flush=True)
        pending = list(started)
        while pending:
            for group in [g for g in pending if g.poll() is not None]:
                pending.remove(group)
                report(group, total)
            if time.monotonic() > deadline:
                for group in pending:
                    print(f"integration: group {group.name} still running after {timeout:.0f} s: stopped",
                          flush=True)
                    group.stop()
                    report(group, total)
                pending = []
            time.sleep(1)
    finally:   # an exception or a signal here: no group outlives this process
        for group in started:
            group.stop()
    for group in started:
        cpu = f", {group.cpu_seconds:.0f} CPU-s" if group.cpu_seconds is not None else ""
        print(f"integration: group {group.name} took {group.seconds:.0f} s{cpu} (exit {group.proc.returncode})")
    print(f"integration: {total.get('passed', 0)} passed, {total.get('failed', 0) + total.get('error', 0)} failed")
    return started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(groups()), help="run one group alone")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a group may run (default 3600)")
    known, pytest_args = parser.parse_known_args(argv)
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("integration groups: needs root and util-linux unshare", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    lock = open(WORK / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"integration groups: another run holds {WORK / '.lock'}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))   # the finally of run() stops them
    fill_cache()
    chosen = {name: modules for name, modules in groups().items() if known.only in (None, name) and modules}
    started = run(chosen, pytest_args, known.timeout)
    return 1 if any(g.proc.returncode != 0 for g in started) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
