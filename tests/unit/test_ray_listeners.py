"""Who holds Ray's ports: `ss -Htlnpe` parsed, the conflicts the launch and the preflight name, and the head's
guard that keeps the run's token from anyone but root's Ray dashboard (run here, against real listeners)."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dapo_ops.ray_listeners import (GUARD_EXIT, Listener, dashboard_guard, node_ports, parse_listeners,
                                    port_conflicts)
from dapo_ops.ray_ports import ray_ports

DATA = Path(__file__).parent.parent / "data" / "listeners"


def test_ss_lines_give_address_port_owner_uid_and_every_process():
    found = {(l.address, l.port): l for l in parse_listeners((DATA / "head-with-stranger.txt").read_text())}
    assert found[("127.0.0.1", 8265)] == Listener("127.0.0.1", 8265, 1001, ((40211, "python3"),))
    assert found[("0.0.0.0", 22)].uid == 0                       # ss prints no uid: for root's sockets
    assert found[("::", 6379)].uid == 112
    assert found[("127.0.0.53%lo", 53)].port == 53
    assert found[("*", 9100)].processes == ((901, "node_exporter"), (902, "node_exporter"))
    assert parse_listeners("State Recv-Q\nnot a socket line\n") == []


def test_the_head_names_every_stranger_on_its_ray_ports_and_a_worker_only_its_own():
    listeners = parse_listeners((DATA / "head-with-stranger.txt").read_text())
    ports = ray_ports(None)
    head = port_conflicts(listeners, node_ports(ports, head=True), "node1")
    assert head == [
        "node1: Ray's dashboard port 8265 is already held (127.0.0.1, pid 40211 python3, uid 1001)",
        "node1: Ray's gcs port 6379 is already held (0.0.0.0, pid 1190 redis-server, uid 112)",
        "node1: Ray's gcs port 6379 is already held (::, pid 1190 redis-server, uid 112)",
        "node1: port 12345 in Ray's worker range is already held (0.0.0.0, pid 5120 nc, uid 1001)",
    ]
    worker = port_conflicts(listeners, node_ports(ports, head=False), "node2")
    assert worker == ["node2: port 12345 in Ray's worker range is already held (0.0.0.0, pid 5120 nc, uid 1001)"]


def test_the_preflight_leaves_out_roots_listeners_a_running_jobs_ray():
    ray = parse_listeners((DATA / "head-running-ray.txt").read_text())
    assert port_conflicts(ray, list(ray_ports(None).ranges), "node1", allow_root=True) == []
    assert len(port_conflicts(ray, list(ray_ports(None).ranges), "node1")) == 4


def test_moved_ports_are_the_ones_checked():
    listeners = parse_listeners((DATA / "head-with-stranger.txt").read_text())
    moved = ray_ports({"gcs": 7379, "dashboard": 9265, "workers": "20002-29999"})
    assert port_conflicts(listeners, node_ports(moved, head=True), "node1") == []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fake_dashboard():
    """A listener whose command line is Ray's dashboard script, started as a given user."""
    directory = Path(tempfile.mkdtemp(prefix="dapo-guard-"))
    script = directory / "ray" / "dashboard" / "dashboard.py"
    script.parent.mkdir(parents=True)
    script.write_text("import socket, sys, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, "
                      "socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', int(sys.argv[1])))\ns.listen()\n"
                      "print('up', flush=True)\ntime.sleep(60)\n")
    for path in (directory, script.parent.parent, script.parent, script):
        path.chmod(0o755)
    started = []

    def start(port: int, uid: int | None = None):
        prefix = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        python = sys.executable if uid is None else shutil.which("python3", path="/usr/bin:/bin")
        proc = subprocess.Popen([*prefix, python, str(script), str(port)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "up"
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()
    shutil.rmtree(directory)


def _guard(port: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", dashboard_guard(port) + "; echo TOKEN-SENT"], capture_output=True,
                          text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the guard is root's, and the stranger another uid")
def test_the_guard_sends_only_to_roots_ray_dashboard(fake_dashboard):
    port = _free_port()
    nobody = _guard(port)
    assert nobody.returncode == GUARD_EXIT and "TOKEN-SENT" not in nobody.stdout
    assert f"nothing listens on the dashboard port {port}" in nobody.stderr

    stranger = fake_dashboard(port, uid=65534)
    refused = _guard(port)
    assert refused.returncode == GUARD_EXIT and "TOKEN-SENT" not in refused.stdout
    assert f"the dashboard port {port} on {socket.gethostname()} is held by a non-root socket" in refused.stderr
    assert f"pid={stranger.pid}" in refused.stderr and "uid:65534" in refused.stderr
    stranger.kill()
    stranger.wait()
    time.sleep(0.2)

    fake_dashboard(port)
    sent = _guard(port)
    assert sent.returncode == 0 and sent.stdout.strip() == "TOKEN-SENT", sent.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as above")
def test_the_guard_refuses_a_root_process_that_is_not_rays_dashboard():
    port = _free_port()
    other = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                              f"s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "up"
        refused = _guard(port)
        assert refused.returncode == GUARD_EXIT and "TOKEN-SENT" not in refused.stdout
        assert f"pid {other.pid} (uid 0: " in refused.stderr and "not root's Ray dashboard" in refused.stderr
    finally:
        other.kill()
        other.wait()


def test_the_preflight_filter_errs_on_a_stranger_and_warns_on_root():
    from filter_plugins.dapo_ops import FilterModule

    holders = FilterModule().filters()["dapo_ray_port_holders"]
    strangers = holders((DATA / "head-with-stranger.txt").read_text(), {}, "node1")
    assert strangers["errors"][0] == ("node1: Ray's dashboard port 8265 is already held "
                                      "(127.0.0.1, pid 40211 python3, uid 1001)")
    assert len(strangers["errors"]) == 4 and strangers["warnings"] == []
    ray = holders((DATA / "head-running-ray.txt").read_text(), None, "node1")
    assert ray["errors"] == [] and len(ray["warnings"]) == 4
    assert ray["warnings"][0].endswith("uid 0): the launch refuses it unless it is this fleet's Ray")
