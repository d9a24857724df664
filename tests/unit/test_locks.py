"""When --break-lock may remove a run's locks: only when the holder is provably gone (launch/locks.py)."""

import os
import socket
import subprocess
import time

import pytest

from dapo_ops.launch.locks import Lock, breakable, launcher_state, process_start

NOW = 1_800_000_000.0
LIMIT = 2400.0


def holder(created="2027-01-15T08:00:00Z", **kw):
    return Lock(**{"run_id": "dapo-1", "controller": "ctl", "pid": 4242, "created": created, **kw})


def iso(seconds_ago: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(NOW - seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_ray_on_a_locked_node_means_the_run_may_be_live_whatever_its_launcher():
    for launcher in ("dead", "alive", "unknown"):
        ok, why = breakable(holder(created=iso(10 * LIMIT)), ["node2"], launcher, LIMIT, NOW)
        assert not ok and "Ray is running on node2" in why and "`dapo-ops stop dapo-1`" in why


def test_a_dead_launcher_without_ray_is_gone_and_a_live_one_is_not():
    assert breakable(holder(), [], "dead", LIMIT, NOW) == (
        True, "its launcher (pid 4242 on ctl) is gone and no Ray runs on its nodes")
    ok, why = breakable(holder(), [], "alive", LIMIT, NOW)
    assert not ok and why == "its launcher (pid 4242 on ctl) is still running"


def test_another_controllers_lock_is_gone_only_when_older_than_any_bring_up():
    ok, why = breakable(holder(created=iso(LIMIT - 60)), [], "unknown", LIMIT, NOW)
    assert not ok and "launched from ctl, which this controller cannot see" in why
    ok, why = breakable(holder(created=iso(LIMIT + 60)), [], "unknown", LIMIT, NOW)
    assert ok and "taken 41 min ago" in why
    assert not breakable(holder(created="garbage"), [], "unknown", LIMIT, NOW)[0]


def test_launcher_state_tells_a_reused_pid_from_the_launcher():
    here = socket.gethostname()
    me = holder(controller=here, pid=os.getpid(), pid_start=process_start(os.getpid()))
    assert launcher_state(me) == "alive"
    assert launcher_state(Lock(**{**me.__dict__, "pid_start": me.pid_start + 1})) == "dead"  # the pid was reused
    child = subprocess.Popen(["true"])
    child.wait()
    assert launcher_state(Lock(**{**me.__dict__, "pid": child.pid, "pid_start": None})) == "dead"
    assert launcher_state(Lock(**{**me.__dict__, "controller": "elsewhere"})) == "unknown"


def test_a_lock_file_from_before_the_per_node_locks_or_garbage_still_names_a_holder():
    old = Lock.parse('{"run_id": "r1", "controller": "c", "pid": 7, "created": "t"}\n')
    assert old == Lock("r1", "c", 7, "t") and old.nodes == [] and old.pid_start is None
    assert Lock.parse("not json").run_id == "unknown"


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a process as another user (CI runs as root)")
def test_only_roots_ray_processes_make_a_node_look_busy(tmp_path):
    """Issue 26: "is Ray running" matches root's processes only: another user's process named like Ray must not keep
    a lock or a teardown waiting. In a PID namespace of its own, so a Ray running on this machine (a simulated
    fleet's) does not count."""
    from dapo_ops.job.render import RAY_RUNNING

    script = (f"setpriv --reuid=65534 --regid=65534 --clear-groups bash -c 'exec -a raylet sleep 30' & sleep 0.3; "
              f"if {RAY_RUNNING}; then echo busy-with-theirs; fi; "
              f"bash -c 'exec -a raylet sleep 30' & sleep 0.3; "
              f"if {RAY_RUNNING}; then echo busy-with-mine; fi; kill %1 %2")
    (tmp_path / "busy.sh").write_text(script)  # a file: a `bash -c` command line would itself match the pattern
    tmp_path.chmod(0o755)
    result = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", str(tmp_path / "busy.sh")],
                            capture_output=True, text=True, timeout=30)
    assert result.stdout.split() == ["busy-with-mine"], result.stdout + result.stderr
