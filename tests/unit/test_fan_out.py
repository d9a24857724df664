"""The one SSH result contract (CommandResult.raise_for, Failure) and the one fan-out every multi-host step uses."""

import threading
import time
from pathlib import Path

import pytest

from dapo_ops.errors import SSHError
from dapo_ops.fleet.ssh import CommandResult, Failure, HostSpec, fan_out
from dapo_ops.launch.cluster import LaunchError


def hosts(*names):
    return [HostSpec(name, "192.0.2.1", Path("/dev/null")) for name in names]


def test_results_come_back_in_host_order_whatever_finishes_first():
    delays = {"a": 0.3, "b": 0.0, "c": 0.15}
    seen = []
    out = fan_out(hosts("a", "b", "c"), lambda h: time.sleep(delays[h.name]) or h.name.upper(),
                  on_done=lambda name, value: seen.append(name))
    assert list(out.results.items()) == [("a", "A"), ("b", "B"), ("c", "C")] and not out.interrupted
    assert seen == ["b", "c", "a"]


def test_at_most_max_workers_run_at_once():
    running, peak, lock = [0], [0], threading.Lock()

    def work(host):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    fan_out(hosts(*"abcdefgh"), work, max_workers=3)
    assert 2 <= peak[0] <= 3


def test_an_exception_is_raised_at_once_without_waiting_for_slow_hosts():
    def work(host):
        if host.name == "slow":
            time.sleep(5)
        raise ValueError(f"{host.name} broke")

    started = time.monotonic()
    with pytest.raises(ValueError, match="fast broke"):
        fan_out(hosts("slow", "fast"), work)
    assert time.monotonic() - started < 2


def test_a_host_not_done_by_the_deadline_is_missing():
    out = fan_out(hosts("quick", "stuck"), lambda h: time.sleep(0 if h.name == "quick" else 5) or "ok",
                  deadline=time.monotonic() + 0.5)
    assert out.results == {"quick": "ok"}


def test_raise_for_names_the_step_the_host_and_why():
    ran = CommandResult("node1", "true", 0, "out\n", "", 0.1)
    assert ran.raise_for("probing") == "out\n"
    exited = CommandResult("node1", "x", 3, "", "line1\nline2\nline3\nline4\n", 0.1)
    with pytest.raises(LaunchError, match=r"^submitting the job on node1 failed \(exit 3\): line2 \| line3 \| line4$"):
        exited.raise_for("submitting the job", LaunchError)
    timed_out = CommandResult("node2", "x", None, "", "", 30.0, Failure.TIMED_OUT, "timed out after 30 s")
    with pytest.raises(SSHError, match="^reading the recipe on node2: timed out after 30 s$"):
        timed_out.raise_for("reading the recipe")
