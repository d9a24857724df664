"""`dapo-ops launch` on a provisioned 2-node simulated fleet with real Ray: launch (with its 32-rank rehearsal),
status, logs, stop; the cluster lock; --rehearse-only; a rehearsal that finds a missing NPU device; a node whose
network is cut during bring-up; a launch asking for more nodes than the inventory has."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from dapo_ops.fleet.ssh import run_on
from dapo_ops.paths import PROJECT_ROOT

from .helpers import hosts, launch_training, put_wheel, set_npu, sh, sigint_as_at_a_terminal

JOB = "jobs/qwen3-30b-a3b-dapo.yaml"


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def assert_torn_down(fleet):
    left = {name: ray_processes(h) for name, h in fleet.items()}
    assert all(found == "" for found in left.values()), left
    starters = "ps -eo args | grep -E '[r]ay-start[.]sh|bin/[r]ay start' || true"
    assert all(sh(h, starters).stdout.strip() == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def ray_processes(host):
    return sh(host, "ps -eo args | grep -E '[r]aylet|[g]cs_server' || true").stdout.strip()


def inventory_copy(tmp_path, first=None, **host_vars):
    """The simulated fleet's inventory, copied: `first` listed first (so it heads a launch), host_vars set."""
    import shutil

    import yaml

    copy = tmp_path / "inventory"
    shutil.copytree(PROJECT_ROOT / "inventory" / "sim", copy)
    data = yaml.safe_load((copy / "hosts.yml").read_text())
    nodes = data["all"]["children"]["npu_nodes"]["hosts"]
    if first:
        nodes = {first: nodes[first], **{k: v for k, v in nodes.items() if k != first}}
    for name, values in host_vars.items():
        nodes[name].update(values)
    data["all"]["children"]["npu_nodes"]["hosts"] = nodes
    (copy / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return str(copy)


pytestmark = pytest.mark.usefixtures("runs_dir")  # run records in a temporary directory (conftest)


@pytest.fixture(scope="module")
def fleet(site_fleet):
    """The 2 x 16 fleet site.yml provisioned (shared with test_provision, conftest), the job's data staged."""
    site_fleet.ensure()
    staged = subprocess.run([sys.executable, "-m", "dapo_sim", "stage", JOB], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=600)
    assert staged.returncode == 0, staged.stderr
    return hosts()


def test_more_nodes_than_the_inventory_is_refused_before_any_change(fleet):
    result = cli("launch", JOB, "--nodes", "3")
    assert result.returncode == 2 and "the job needs 3 node(s) but the inventory has 2" in result.stderr
    assert all(ray_processes(h) == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


# A node's listening TCP sockets, "ADDRESS:PORT PROCESS" per line (sshd left out).
LISTENING = "ss -ltnpH | awk '{print $4, $6}' | grep -v sshd || true"
# Every port in 1-65535 that dapo_ops/ray_ports.py pins (gcs/dashboard from the job spec's defaults).
PINNED = {int(p) for name, value in __import__("dapo_ops.ray_ports", fromlist=["x"]).ray_ports(None).as_map().items()
          for p in ([value] if "-" not in value else range(int(value.split("-")[0]), int(value.split("-")[1]) + 1))}
TRY_PORTS = """import socket, sys
from concurrent.futures import ThreadPoolExecutor
def answers(port):
    try:
        socket.create_connection((sys.argv[1], port), timeout=2).close()
        return port
    except OSError:
        return None
with ThreadPoolExecutor(64) as pool:
    print(" ".join(str(p) for p in pool.map(answers, [int(p) for p in sys.argv[2:]]) if p))
"""


# An HTTP request without Ray's token, from a node: prints the status code (urllib raises HTTPError for 4xx).
NO_TOKEN_REQUEST = """import sys, urllib.error, urllib.request
data = sys.argv[2].encode() if len(sys.argv) > 2 else None
request = urllib.request.Request(sys.argv[1], data=data, headers={"Content-Type": "application/json"})
try:
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
    print(200)
except urllib.error.HTTPError as error:
    print(error.code)
"""


# A TLS client of a Ray gRPC port (issue 26 (9)): trusts the CA file given, presents the certificate given (if any),
# sends HTTP/2's preface; prints whether the server answered, and the sha256 of the certificate the server showed.
TLS_CLIENT = """import hashlib, socket, ssl, sys
host, port, ca, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.load_verify_locations(ca)
context.set_alpn_protocols(["h2"])
if cert:
    context.load_cert_chain(cert, key)
try:
    with socket.create_connection((host, port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
        answer = tls.recv(9)
        print("answered" if answer else "closed", hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest())
except (ssl.SSLError, OSError) as exc:
    print("refused", type(exc).__name__, exc)
"""
CERT_SHA256 = "import hashlib, ssl, sys; print(hashlib.sha256(ssl.PEM_cert_to_DER_cert(open(sys.argv[1]).read())).hexdigest())"


def tls_client(host, address, port, ca, cert="", key=""):
    args = " ".join(shlex.quote(a) for a in ("/usr/bin/python3", "-c", TLS_CLIENT, address, str(port), ca, cert, key))
    return sh(host, args).stdout.strip()


def open_ports(ip, ports, netns=None):
    """The ports of `ports` that accept a connection to ip, tried from the root namespace or from `netns`."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run([*prefix, sys.executable, "-c", TRY_PORTS, ip, *map(str, ports)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return {int(p) for p in out.split()}


@pytest.fixture
def outsider():
    """A namespace on the simulated training network that is no node of the run (10.78.0.250 on its bridge)."""
    from dapo_sim.netns import DATA_BRIDGE, DATA_SUBNET

    name = "outsider-probe"
    run = lambda *args: subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)  # noqa: E731
    try:
        run("netns", "add", name)
        run("link", "add", "outs0h", "type", "veth", "peer", "name", "outs0n")
        run("link", "set", "outs0h", "master", DATA_BRIDGE, "up")
        run("link", "set", "outs0n", "netns", name)
        for args in (["link", "set", "lo", "up"], ["addr", "add", f"{DATA_SUBNET}.250/24", "dev", "outs0n"],
                     ["link", "set", "outs0n", "up"]):
            run("-n", name, *args)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", "outs0h"], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def ray_listening(host):
    """{(address, port): process} of every TCP socket a Ray process listens on, outside the loopback."""
    found = {}
    for line in sh(host, LISTENING).stdout.splitlines():
        where, _, process = line.partition(" ")
        address, _, port = where.rpartition(":")
        if not address.startswith("127.") and address != "[::1]":
            found[(address, int(port))] = process
    return found


def test_launch_status_logs_stop(fleet, runs_dir, tmp_path, outsider):
    """The full launch, with wandb: the key reaches verl's TaskRunner (the stand-in's wandb lookup passes) and no
    other place; Ray's ports are pinned and answer the run's nodes only (issue 15, items 1 and 2)."""
    import yaml

    from dapo_ops.layout import node_layout

    # wandb 0.23.1 checks a key's form (40+ characters after its first dash: wandb/sdk/lib/auth/validation.py)
    key = f"dapo-test-key-{os.getpid()}-{time.time_ns()}-" + "x" * 24
    key_file = tmp_path / "wandb.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    job = yaml.safe_load((PROJECT_ROOT / JOB).read_text())
    job["trainer"]["loggers"] = ["console", "file", "wandb"]
    job["secrets"] = ["WANDB_API_KEY"]
    job.setdefault("env", {}).setdefault("extra", {})["DAPO_SIM_TRAIN_SECONDS"] = "7"   # four 2 s steps
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    # issue 26 (9): this launch runs Ray's gRPC over mutual TLS with the run's own certificates
    tls_inventory = inventory_copy(tmp_path, node1={"dapo_ray_tls": True}, node2={"dapo_ray_tls": True})
    launched = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "launch", str(job_file), "--nodes", "2", "--json",
                               "-i", tls_inventory],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600,
                              env={k: v for k, v in dict(os.environ, WANDB_API_KEY_FILE=str(key_file)).items()
                                   if k != "WANDB_API_KEY"})
    assert launched.returncode == 0, launched.stderr
    record = json.loads(launched.stdout)
    run_id = record["run_id"]
    assert record["state"] == "running" and record["stack"]["node1"]["torch_npu"]
    # issue 16: `report --follow` from the start of the job to its end (a read before the training would find no step)
    following = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "report", run_id, "--follow", "--interval",
                                  "1", "--json"], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    # issue 15 (2): while the job runs, the key is in the run's 0600 netrc file on each node and nowhere else: not
    # in a process's environment or command line, not in Ray's job metadata, not in the files on the controller
    for host in fleet.values():
        found = sh(host, f"grep -rlsF -- {key} /var/lib/dapo-ops /tmp /root /etc /var/log /data || true").stdout.split()
        assert found == [f"/var/lib/dapo-ops/runs/{run_id}/wandb.netrc"], found
        private = f"/var/lib/dapo-ops/runs/{run_id}/wandb.netrc /var/lib/dapo-ops/runs/{run_id}/ray-token"
        assert sh(host, f"stat -c %a {private}").stdout.split() == ["600", "600"]
        # the key in two pieces, so that no command line of this check holds it whole
        pattern = f"<(printf '%s%s\\n' {key[:10]} {key[10:]})"
        proc = f"grep -lsF -f {pattern} /proc/[0-9]*/environ /proc/[0-9]*/cmdline {found[0]} || true"
        assert sh(host, f"bash -c {shlex.quote(proc)}").stdout.split() == [found[0]]  # the netrc: the grep works
    ray = node_layout(fleet["node1"].vars).ray
    token = f"/var/lib/dapo-ops/runs/{run_id}/ray-token"
    jobs = sh(fleet["node1"], f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={token} {ray} job list "
                              "--address=http://127.0.0.1:8265 2>&1 || true").stdout
    assert run_id in jobs and key not in jobs and "wandb.netrc" in jobs
    assert not [p for p in runs_dir.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    rehearsal = record["rehearsal"]
    assert rehearsal["ok"] and rehearsal["hosts"] == {"node1": 16, "node2": 16}
    assert [r["rank"] for r in rehearsal["per_rank"]] == list(range(32))
    assert {r["host"] for r in rehearsal["per_rank"][:16]} == {"node1"}
    assert rehearsal["per_rank"][21] | {"timings": None} == {"rank": 21, "host": "node2", "device": "/dev/davinci5",
                                                            "pid": rehearsal["per_rank"][21]["pid"], "timings": None}
    assert set(rehearsal["timings"]) == {"check", "all_reduce", "all_to_all"}
    assert all(ray_processes(h) for h in fleet.values())  # a raylet on each node
    head_ip = record["head_address"]  # issue 15 (1): the dashboard's job API answers on the head's loopback only
    assert sh(fleet["node2"], f"timeout 5 bash -c '</dev/tcp/{head_ip}/8265'", ok=False).exit_code != 0
    assert sh(fleet["node1"], f"timeout 5 bash -c '</dev/tcp/{head_ip}/8265'", ok=False).exit_code != 0
    sh(fleet["node1"], "timeout 5 bash -c '</dev/tcp/127.0.0.1/8265'")
    for host in fleet.values():  # issue 15 (6): Ray's temp dir inside a root-only directory, nothing in /tmp/ray
        assert sh(host, "stat -c %a /var/lib/dapo-ops/ray").stdout.strip() == "700"
        sh(host, "test -d /var/lib/dapo-ops/ray/tmp/session_latest/logs && test ! -e /tmp/ray")
    second = cli("launch", JOB, "--nodes", "2", "--no-audit")
    assert second.returncode == 1 and f"locked by run {run_id}" in second.stderr
    # issue 26 (low): a reload of node2's firewall flushes the run's table; the next look at the run loads it again
    table = "dapo_ops_" + run_id.replace("-", "_")
    sh(fleet["node2"], "nft flush ruleset")
    assert table not in sh(fleet["node2"], "nft list tables").stdout
    looked = cli("status", run_id)
    said = looked.stdout + looked.stderr
    assert "node2: the run's firewall table was gone" in said and "node1: the run's" not in said, said
    assert table in sh(fleet["node2"], "nft list tables").stdout
    # issue 28 (8): the run remembers its inventory: its status from another directory with none configured
    unset = ("DAPO_OPS_INVENTORY", "ANSIBLE_INVENTORY", "ANSIBLE_CONFIG")
    remembered = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "status", run_id, "--json"], cwd="/",
                                env={k: v for k, v in os.environ.items() if k not in unset},
                                capture_output=True, text=True, timeout=120)
    assert remembered.returncode == 0 and json.loads(remembered.stdout)["run_id"] == run_id, remembered.stderr
    deadline = time.monotonic() + 120
    while True:
        status = cli("status", run_id, "--json")
        state = json.loads(status.stdout)["ray_job_status"]
        if state in ("SUCCEEDED", "FAILED", "STOPPED") or time.monotonic() > deadline:
            break
        time.sleep(3)
    logs = cli("logs", run_id)
    assert state == "SUCCEEDED", status.stdout + status.stderr + logs.stdout[-3000:]
    # issue 26 (low): the job is over, and its key has left the nodes (`status` saw the end); the Ray token stays
    # while Ray does (`logs` above used it)
    for host in fleet.values():
        assert sh(host, f"grep -rlsF -- {key} /var/lib/dapo-ops /tmp /root /etc /var/log /data || true").stdout == ""
        sh(host, f"test -s {token}")
    assert logs.returncode == 0 and "dapo-ops dry mode: DAPO config composed (nnodes=2, n_gpus_per_node=16" in logs.stdout
    assert key not in logs.stdout
    followed, follow_err = following.communicate(timeout=120)
    assert following.returncode == 0, follow_err
    summary = json.loads(followed)["summary"]
    assert summary["steps"]["trained"] == 4 and 1.9 < summary["step_time_s"]["median"] < 6, summary
    report_dir = runs_dir / run_id / "report"
    jsonl = [json.loads(line) for line in (report_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in jsonl] == [0, 1, 2, 3, 4]       # verl's file logger, from node2 where it ran
    assert (report_dir / "report.html").stat().st_size > 10_000 and (report_dir / "step_time.png").exists()

    # issue 15 (1): every port Ray listens on is a pinned one; from a namespace outside the run none answers, from
    # the controller's management address neither, while the run's other node reaches the GCS
    listening = {node: ray_listening(host) for node, host in fleet.items()}
    assert all(listening.values())
    unpinned = {node: {f"{a}:{p}": process for (a, p), process in ports.items() if p not in PINNED}
                for node, ports in listening.items()}
    assert unpinned == {"node1": {}, "node2": {}}
    head_ports = sorted({port for _, port in listening["node1"]})
    assert open_ports(head_ip, head_ports, netns=outsider) == set()
    assert open_ports(fleet["node1"].address, head_ports) == set()
    assert open_ports(head_ip, [6379, 10001, 52365], netns=outsider) == set()
    assert sh(fleet["node2"], f"timeout 5 bash -c '</dev/tcp/{head_ip}/6379'", ok=False).exit_code == 0
    # issue 26 (3): the job's own servers on kernel-chosen ports (here a stand-in on 0.0.0.0:23456 of the head)
    # answer the run's nodes over the HCCL NIC, and nobody else there
    sh(fleet["node1"], "(nohup /usr/bin/python3 -c 'import socket, time; s = socket.create_server((\"0.0.0.0\", "
                       "23456)); time.sleep(120)' >/dev/null 2>&1 &); sleep 1")
    try:
        assert open_ports(head_ip, [23456], netns=outsider) == set()
        assert sh(fleet["node2"], f"timeout 5 bash -c '</dev/tcp/{head_ip}/23456'", ok=False).exit_code == 0
    finally:
        sh(fleet["node1"], "pkill -f '[c]reate_server..\"0.0.0.0\", 23456' || true")
    # Ray's token authentication: on the head itself (inside the firewall) the job APIs refuse a request without the
    # run's token, the dashboard's and the one of the dashboard agent that ran `id` as root in the issue
    python = node_layout(fleet["node1"].vars).python
    for url, body in (("http://127.0.0.1:8265/api/v0/nodes", None),
                      (f"http://{head_ip}:52365/api/job_agent/jobs/", '{"entrypoint": "id"}')):
        args = " ".join(shlex.quote(a) for a in (python, "-c", NO_TOKEN_REQUEST, url, *([body] if body else [])))
        assert sh(fleet["node1"], args).stdout.strip() == "401", url
    for host in fleet.values():
        assert table in sh(host, "nft list tables").stdout
    # issue 26 (9): the GCS on the head and node2's raylet speak TLS with the run's certificates; a client with the
    # run's certificate is answered, one without any is refused (Ray asks for a client certificate signed by the CA)
    run_dir = f"/var/lib/dapo-ops/runs/{run_id}"
    tls_ca, tls_cert, tls_key = f"{run_dir}/ray-tls-ca.crt", f"{run_dir}/ray-tls.crt", f"{run_dir}/ray-tls.key"
    node2_ip = record["addresses"]["node2"]
    for client, server, address, port in ((fleet["node2"], fleet["node1"], head_ip, 6379),
                                          (fleet["node1"], fleet["node2"], node2_ip, 6380)):
        shown = sh(server, f"/usr/bin/python3 -c {shlex.quote(CERT_SHA256)} {tls_cert}").stdout.strip()
        assert tls_client(client, address, port, tls_ca, tls_cert, tls_key) == f"answered {shown}"
        assert not tls_client(client, address, port, tls_ca).startswith("answered")
    for host in fleet.values():
        assert sh(host, f"stat -c %a {tls_ca} {tls_cert} {tls_key}").stdout.split() == ["600"] * 3


    stopped = cli("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert all(ray_processes(h) == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    for host in fleet.values():  # the secret, the Ray token and the firewall table are gone with the run
        assert sh(host, f"grep -rlsF -- {key} /var/lib/dapo-ops /tmp /root /etc /var/log /data || true").stdout == ""
        left = sh(host, f"ls /var/lib/dapo-ops/runs/{run_id}").stdout.split()
        assert not {"ray-token", "ray-tls-ca.crt", "ray-tls.crt", "ray-tls.key"} & set(left), left
        assert table not in sh(host, "nft list tables").stdout
    runs = json.loads(cli("runs", "--json").stdout)
    assert next(r for r in runs if r["run_id"] == run_id)["state"] == "stopped"
    rendered = runs_dir / run_id
    assert (rendered / "job.yaml").exists() and (rendered / "rendered" / "nodes" / "node1" / "submit.sh").exists()


def test_rehearse_only_places_32_ranks_and_leaves_nothing_running(fleet):
    """F14: a lock left on node1 by a launch of this controller that died is named and broken with --break-lock;
    a Ray someone started by hand on node2 is stopped before the run's own starts."""
    import socket

    from dapo_ops.layout import node_layout

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = json.dumps({"run_id": "stale-run", "controller": socket.gethostname(), "pid": dead.pid, "pid_start": 1,
                        "created": "2026-01-01T00:00:00Z", "nodes": ["node1"]})
    sh(fleet["node1"], f"mkdir -p /var/lib/dapo-ops && printf '%s\\n' '{stale}' > /var/lib/dapo-ops/cluster.lock")
    refused = cli("launch", JOB, "--nodes", "2", "--rehearse-only", "--no-audit")
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"dapo-ops: node1 is locked by run stale-run (launched from {socket.gethostname()}, pid {dead.pid}, at "
        f"2026-01-01T00:00:00Z) — its launcher (pid {dead.pid} on {socket.gethostname()}) is gone and no Ray runs "
        "on its nodes; rerun with --break-lock")
    node2 = fleet["node2"]
    # a run that died without a stop left its private files on node2 (issue 26, low): the next launch sweeps them
    dead_run_dir = "/var/lib/dapo-ops/runs/dead-run-1"
    sh(node2, f"install -d -m 0700 {dead_run_dir} && "
              f"for f in ray-token wandb.netrc ray-tls.key env.sh; do echo x > {dead_run_dir}/$f; done")
    sh(node2, f"source {node_layout(node2.vars).env_script} && {node_layout(node2.vars).ray} start --head "
              "--port=6399 --num-cpus=1 --include-dashboard=false --disable-usage-stats >/dev/null", timeout=120)
    assert ray_processes(node2)
    result = cli("launch", JOB, "--nodes", "2", "--rehearse-only", "--no-audit", "--break-lock", "--json")
    assert result.returncode == 0, result.stderr
    assert "broke the lock of run stale-run: its launcher" in result.stderr
    assert "stop Ray leftovers" in result.stderr
    record = json.loads(result.stdout)
    assert record["state"] == "rehearsed" and record["submission_id"] is None
    assert record["rehearsal"]["backend"] == "tcp" and len(record["rehearsal"]["per_rank"]) == 32
    assert "32 ranks placed (16 on node1, 16 on node2)" in result.stderr
    assert sh(node2, f"ls {dead_run_dir}").stdout.split() == ["env.sh"]
    assert_torn_down(fleet)


# A stranger's listener: every request's headers appended to a file; prints "up" once it listens.
RECORDING_LISTENER = """import http.server, sys
class Heard(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[2], "a") as out:
            out.write(str(self.headers))
        self.send_response(200)
        self.end_headers()
    do_POST = do_GET
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Heard)
print("up", flush=True)
server.serve_forever()
"""


def test_an_unprivileged_listener_on_the_dashboard_port_gets_no_token_and_is_named(fleet):
    """#26: a local user who binds the head's dashboard port before a launch would get every `ray job` call's
    `Authorization: Bearer <token>`. The launch names the port and its owner and sends nothing."""
    head = fleet["node1"]
    sh(head, "install -d -m 0777 /tmp/dapo-stranger && rm -f /tmp/dapo-stranger/heard")
    sh(head, f"nohup setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c "
             f"{shlex.quote(RECORDING_LISTENER)} 8265 /tmp/dapo-stranger/heard >/tmp/dapo-stranger/out 2>&1 &")
    try:
        sh(head, "for _ in $(seq 50); do grep -q up /tmp/dapo-stranger/out && exit 0; sleep 0.1; done; exit 1")
        pid = sh(head, "ss -Htlnp 'sport = :8265' | grep -o 'pid=[0-9]*' | cut -d= -f2").stdout.strip()
        result = cli("launch", JOB, "--nodes", "2", "--rehearse-only", "--no-audit")
        assert result.returncode == 1, result.stderr
        assert (f"node1: Ray's dashboard port 8265 is already held (127.0.0.1, pid {pid} python3, uid 65534)"
                in result.stderr.strip().splitlines()[-1])
        assert "start Ray" not in result.stderr
        heard = sh(head, "cat /tmp/dapo-stranger/heard 2>/dev/null || true").stdout
        assert "Bearer" not in heard and "Authorization" not in heard
        assert_torn_down(fleet)
    finally:
        sh(head, "pkill -f '[d]apo-stranger/heard' || true; rm -rf /tmp/dapo-stranger")


def test_a_rehearsal_names_each_rank_without_its_npu_device_or_its_cann_environment(fleet):
    """/dev/davinci5 hidden on node2 (F7), node2's tokenizer.json moved away (issue 25: verl builds the tokenizer on
    every node), and node1's CANN environment script emptied (F2: Ray and every actor on node1 then run without it):
    the rehearsal names the first failing rank and records every rank's problem."""
    model = "/data/models/Qwen3-30B-A3B"
    sh(fleet["node2"], f"mv /dev/davinci5 /dev/.davinci5.hidden && mv {model}/tokenizer.json /root/tokenizer.json")
    try:
        result = rehearse_with_env_script(fleet, "node1", ": >")
    finally:
        sh(fleet["node2"], f"mv /dev/.davinci5.hidden /dev/davinci5; mv /root/tokenizer.json {model}/tokenizer.json")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        "dapo-ops: rehearsal failed: rank 0 on node1: ASCEND_TOOLKIT_HOME is not set (the CANN environment was not "
        "sourced)"), result.stderr
    assert_torn_down(fleet)
    runs = json.loads(cli("runs", "--json").stdout)
    failed = runs[-1]
    assert failed["state"] == "failed" and failed["submission_id"] is None
    failures = failed["rehearsal"]["failures"]  # one per problem and rank
    assert {f["rank"] for f in failures} == set(range(32))     # node1: unsourced; node2: the tokenizer (21: NPU 5)
    tokenizer = (f"{model}/tokenizer.json is missing (and no vocab.json with merges.txt): verl builds the tokenizer "
                 "on every node")
    on_node2 = [f for f in failures if f["host"] == "node2"]
    assert sorted((f["rank"], f["error"]) for f in on_node2) == sorted(
        [(rank, tokenizer) for rank in range(16, 32)] + [(21, "/dev/davinci5 is missing (NPU 5 not visible on this node)")])
    unsourced = {(f["rank"], f["error"].split()[0]) for f in failures if f["host"] == "node1"}
    assert unsourced == {(rank, name) for rank in range(16)
                         for name in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ATB_HOME_PATH")}


def test_a_node_cut_off_during_bring_up_fails_the_launch_and_tears_down_the_rest(fleet, tmp_path):
    # a worker's attempt bounded to 20 s (the inventory's dapo_launch_timeouts; the default is 60)
    timeouts = {"dapo_launch_timeouts": {"workers": 20}}
    inventory = inventory_copy(tmp_path, node1=timeouts, node2=timeouts)
    launch = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "launch", JOB, "--nodes", "2", "--no-audit",
                               "-i", inventory],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=sigint_as_at_a_terminal)
    cut = False
    try:
        lines = []
        for line in launch.stdout:
            lines.append(line)
            if "start Ray: the head on node1" in line and not cut:
                for link in ("dapo2n", "data0"):  # the management and the training network
                    subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "down"], check=True)
                cut = True
        launch.wait(timeout=300)
    finally:
        for link in ("dapo2n", "data0"):
            subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "up"], check=True)
        if launch.poll() is None:
            launch.kill()
    output = "".join(lines)
    assert cut and launch.returncode == 1, output
    assert lines[-1].startswith("dapo-ops: starting the Ray worker on node2"), output
    deadline = time.monotonic() + 30
    while run_on(fleet["node2"], "true", timeout=10).error and time.monotonic() < deadline:
        time.sleep(1)
    failed = json.loads(cli("runs", "--json").stdout)[-1]
    assert failed["state"] == "failed" and "node2" in failed["reason"] and "ray_up" not in failed["timestamps"]
    # node2 was cut off during the teardown: its lock stays (held by the failed run) until `stop` retries
    assert "Ray is still up on node2, which keep the run's lock, token and firewall table: " in failed["reason"]
    assert "`dapo-ops stop " in failed["reason"]
    assert failed["run_id"] in sh(fleet["node2"], "cat /var/lib/dapo-ops/cluster.lock").stdout
    stopped = cli("stop", failed["run_id"])
    assert stopped.returncode == 0, stopped.stderr
    assert_torn_down(fleet)
    assert sh(fleet["node2"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "term"])
def test_ctrl_c_during_bring_up_tears_down_and_records_the_interruption(fleet, signum):
    """Ctrl-C, and SIGTERM as a scheduler or `kill` sends it (issue 15, 5), tear down what was started."""
    launch = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "launch", JOB, "--nodes", "2", "--no-audit"],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=sigint_as_at_a_terminal)
    lines = []
    for line in launch.stdout:
        lines.append(line)
        # once: the step's closing line (✗ ... interrupted) names the step too, and a second signal would land in
        # the teardown (or on the exiting process), which is another test's case
        if "… start Ray: the head on node1" in line:
            time.sleep(3)  # the head is starting and the worker waits for it
            launch.send_signal(signum)
    launch.wait(timeout=120)
    output = "".join(lines)
    assert launch.returncode == 1 and "launch interrupted; what was started has been torn down" in lines[-1], output
    assert "tear down after the failure" in output
    assert_torn_down(fleet)
    failed = json.loads(cli("runs", "--json").stdout)[-1]
    assert failed["state"] == "failed" and failed["reason"] == "interrupted"


def test_a_launcher_killed_with_sigkill_is_seen_by_the_next_command_and_stop_cleans_up(fleet):
    """Issue 15 (5): nothing can run after SIGKILL; the run records the launcher's pid and start time, so `runs`
    marks the run failed and names the clean-up, which `stop` does."""
    launch = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "launch", JOB, "--nodes", "2", "--no-audit"],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in launch.stdout:
        if "start Ray: the head on node1" in line:
            time.sleep(3)
            launch.kill()
            break
    launch.wait(timeout=60)
    killed = json.loads(cli("runs", "--json").stdout)[-1]
    assert killed["state"] == "failed", killed
    assert killed["reason"] == (f"its launcher (pid {launch.pid}) was killed before the launch ended; "
                                f"`dapo-ops stop {killed['run_id']}` stops what it started and frees its nodes")
    assert f"locked by run {killed['run_id']}" in cli("launch", JOB, "--nodes", "2", "--no-audit").stderr
    stopped = cli("stop", killed["run_id"])
    assert stopped.returncode == 0, stopped.stderr
    assert_torn_down(fleet)
    assert sh(fleet["node2"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def test_the_audit_reads_the_stack_live_and_the_launch_gate_refuses_before_any_change(fleet, tmp_path):
    """F2, F4, F7: after site.yml verified the stack, node2's env gets numpy 2 and loses libhccl.so, node1's NPU 3
    turns Critical. The verify record still says clean; the audit (live) says otherwise, and launch stops at it."""
    from dapo_ops.layout import node_layout
    from dapo_ops.manifest import load_manifest

    node1, node2 = fleet["node1"], fleet["node2"]
    pip = node_layout(node2.vars).pip
    lib = "/usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so"
    before = {dist: sh(node2, f"{pip} show {dist} | sed -n 's/^Version: //p'").stdout.strip()
              for dist in ("numpy", "protobuf")}
    wheels = [put_wheel(node2, tmp_path, "numpy", "2.2.6"), put_wheel(node2, tmp_path, "protobuf", "3.20.3")]
    # PIP_CONFIG_FILE=/dev/null: past the env's pip.conf, whose constraint (the lock) refuses these versions
    sh(node2, f"mv {lib} {lib}.hidden && PIP_CONFIG_FILE=/dev/null {pip} install -q --no-deps --no-index "
              f"{' '.join(wheels)}")
    set_npu(node1, 3, health="Critical")
    try:
        audited = cli("audit", "--json")
        gate = cli("launch", JOB, "--nodes", "2")
    finally:
        set_npu(node1, 3, health="OK")
        sh(node2, f"mv {lib}.hidden {lib} && {pip} install -q --no-deps --force-reinstall "
                  f"numpy=={before['numpy']} protobuf=={before['protobuf']}", timeout=180)
    assert audited.returncode == 1, audited.stderr
    found = {(f["host"], f["code"], f["npu"]): f for f in json.loads(audited.stdout)["findings"]}
    spec = load_manifest().packages["numpy"]
    assert found[("node2", "stack-off-pin", None)]["severity"] == "error"
    messages = [f["message"] for f in json.loads(audited.stdout)["findings"] if f["host"] == "node2"]
    assert f"numpy 2.2.6 does not satisfy numpy{spec}" in messages, messages
    assert any(m.startswith("torch_npu does not import: ImportError: libhccl.so: cannot open shared object file")
               for m in messages), messages
    stale = found[("node2", "fact-file-stale", None)]
    assert stale["severity"] == "warning" and f"numpy {before['numpy']} (live 2.2.6)" in stale["message"]
    # F6: a protobuf other than the lock's (what another package's requirements can pull in) is named by the lock
    off_lock = {f["component"]: f["message"] for f in json.loads(audited.stdout)["findings"]
                if f["host"] == "node2" and f["code"] == "dist-off-lock"}
    assert set(off_lock) == {"numpy", "protobuf"}, off_lock
    assert off_lock["protobuf"].startswith("protobuf is 3.20.3, the ") and before["protobuf"] in off_lock["protobuf"]
    assert found[("node1", "npu-unhealthy", 3)]["message"].endswith("health is Critical")
    assert {k for k in found if k[0] == "node1"} == {("node1", "npu-unhealthy", 3)}
    assert gate.returncode == 1 and "on the chosen nodes (use --force to launch anyway)" in gate.stderr, gate.stderr
    assert "node2: numpy 2.2.6 does not satisfy" in gate.stderr and "node1: " in gate.stderr
    for host in fleet.values():
        assert ray_processes(host) == ""
        assert sh(host, "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    assert cli("audit").returncode == 0  # restored


def test_a_module_broken_inside_an_installed_distribution_fails_verify_the_audit_and_the_launch_gate(fleet):
    """Issue 24: one module of the installed datasets breaks on node2 as datasets 2.14.4 did with pyarrow 21
    (a subclass of pyarrow.PyExtensionType at import). Its version, metadata and RECORD stay the same, so no lock
    comparison can see it: the import sweep must. verify fails naming the distribution, the audit exits 1 naming
    node2 and datasets, and launch refuses before any change."""
    from dapo_ops.layout import node_layout

    from .ansible_helpers import playbook

    node2 = fleet["node2"]
    python = node_layout(node2.vars).python
    where = sh(node2, f"{python} -c 'import datasets.features.features as f; print(f.__file__)'").stdout.strip()
    sh(node2, f"cp -p {where} {where}.orig && printf '\\nclass _Broken(pa.PyExtensionType):\\n    pass\\n' >> {where}")
    try:
        verify_rc, verify_output, _ = playbook("--tags", "verify", "--limit", "node2")
        audited = cli("audit", "--json")
        gate = cli("launch", JOB, "--nodes", "2")
    finally:
        sh(node2, f"mv {where}.orig {where}")
    broken = "module datasets does not import: AttributeError: module 'pyarrow' has no attribute 'PyExtensionType'"
    assert verify_rc == 2 and f"node2: datasets: {broken}" in " ".join(verify_output.split()), verify_output[-3000:]
    assert audited.returncode == 1, audited.stderr
    findings = [f for f in json.loads(audited.stdout)["findings"] if f["code"] == "import-fails"]
    assert {(f["host"], f["component"]) for f in findings} == {("node2", "datasets")}, findings
    assert findings[0]["severity"] == "error" and findings[0]["message"] == f"datasets: {broken}"
    assert gate.returncode == 1 and f"node2: datasets: {broken}" in gate.stderr, gate.stderr
    for host in fleet.values():
        assert ray_processes(host) == ""
        assert sh(host, "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    assert cli("audit").returncode == 0  # restored: the sweep sees the env changed back and imports again


def top_while_training(run_id: str) -> dict:
    """`top RUN --once --json` until the run has logged a step and every NPU of both nodes is busy (the stand-in
    marks them for each step: the emulated npu-smi follows), for two minutes at most; the last document."""
    deadline = time.monotonic() + 120
    while True:
        shown = cli("top", run_id, "--once", "--json")
        assert shown.returncode == 0, shown.stderr
        doc = json.loads(shown.stdout)
        if doc["run"]["step"] and all(npu["aicore_pct"] for node in doc["nodes"] for npu in node["npus"]):
            return doc
        if time.monotonic() > deadline:
            return doc
        time.sleep(2)


def test_a_live_run_locks_every_node_and_a_node_lost_in_training_is_noticed_named_and_the_rest_stopped(
        fleet, tmp_path, runs_dir):
    """F14 and F17: a run "training" for minutes holds a lock on both nodes; a second launch and --break-lock are
    refused while its Ray runs. node2 is cut off: `dapo-ops watch` names it, records the run failed and stops
    Ray on node1, freeing node1's lock; `dapo-ops stop` cleans node2 once it is back. Issue 31: `top RUN` shows the
    run's step and its NPUs busy on both nodes, and records what it sampled in the run."""
    run_id = launch_training(tmp_path)
    cut, watched = False, None
    try:
        for host in fleet.values():
            assert f'"run_id": "{run_id}"' in sh(host, "cat /var/lib/dapo-ops/cluster.lock").stdout
        broken = cli("launch", JOB, "--nodes", "2", "--no-audit", "--break-lock")
        assert broken.returncode == 1 and f"--break-lock refused: run {run_id}" in broken.stderr, broken.stderr
        assert "Ray is running on node1, node2" in broken.stderr
        other_head = cli("launch", JOB, "--nodes", "2", "--no-audit", "-i", inventory_copy(tmp_path, first="node2"))
        assert "(head node2)" in other_head.stdout + other_head.stderr, other_head.stdout + other_head.stderr
        assert other_head.returncode == 1 and f"node1, node2 are locked by run {run_id}" in other_head.stderr, \
            other_head.stderr
        status = cli("status", run_id, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["ray_job_status"] == "RUNNING", status.stderr
        shown = top_while_training(run_id)
        assert shown["run"]["run_id"] == run_id and shown["run"]["step"] >= 1, shown["run"]
        assert 1.9 < shown["run"]["step_seconds"] < 6, shown["run"]
        assert all(70 <= npu["aicore_pct"] <= 100 and npu["hbm_used_mb"] > 50_000
                   for node in shown["nodes"] for npu in node["npus"]), shown["nodes"]
        recorded = [json.loads(line) for line in (runs_dir / run_id / "hardware.jsonl").read_text().splitlines()]
        assert recorded[-1]["step"] == shown["run"]["step"] and set(recorded[-1]["nodes"]) == {"node1", "node2"}
        set_npu(fleet["node1"], 3, health="Critical")  # a dead NPU, noticed and (keep) left to the job
        try:
            kept = cli("status", run_id, "--on-node-loss", "keep")
        finally:
            set_npu(fleet["node1"], 3, health="OK")
        assert kept.returncode == 1 and kept.stderr.strip().splitlines()[-1] == (
            f"dapo-ops: run {run_id} running: node1 lost during training: NPU 3 health is Critical (kept running: "
            "--on-node-loss keep)"), kept.stderr
        assert ray_processes(fleet["node1"]) and ray_processes(fleet["node2"])
        for link in ("dapo2n", "data0"):
            subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "down"], check=True)
        cut = True
        watched = cli("watch", run_id, "--interval", "3", timeout=240)
    finally:
        if cut:
            for link in ("dapo2n", "data0"):
                subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "up"], check=True)
        if watched is None:  # failed before the watch: the run would hold both nodes for the next tests
            cli("stop", run_id)
    assert watched.returncode == 1, watched.stdout + watched.stderr
    last = watched.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dapo-ops: run {run_id} failed: node2 lost during training: unreachable over SSH"), last
    record = next(r for r in json.loads(cli("runs", "--json").stdout) if r["run_id"] == run_id)
    assert record["state"] == "failed" and "Ray and the lock left on node2" in record["reason"]
    assert ray_processes(fleet["node1"]) == ""
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    deadline = time.monotonic() + 30
    while run_on(fleet["node2"], "true", timeout=10).error and time.monotonic() < deadline:
        time.sleep(1)
    stopped = cli("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert_torn_down(fleet)
    assert sh(fleet["node2"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


CORPUS = PROJECT_ROOT / "tests" / "data" / "jobs"


@pytest.mark.parametrize("case, message", [
    ("misspelled-override-key", "did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'"),  # F10
    ("reward-key-of-a-newer-verl", "verl moved it: the pinned verl has 'reward_model.overlong_buffer.len'"),  # F10
    ("sp-not-dividing-world", "does not divide the world size 32"),  # F11
    ("actor-phase-beyond-hbm", "the actor update phase needs about"),  # F12
])
def test_launch_refuses_what_validate_refuses_before_any_node_is_touched(fleet, case, message):
    result = cli("launch", str(CORPUS / f"{case}.yaml"), "--nodes", "2")
    assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], result.stderr
    assert "lock node1" not in result.stderr
    for host in fleet.values():
        assert sh(host, "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def test_a_nic_that_does_not_exist_is_refused_naming_host_and_variable(fleet, tmp_path):
    """F9: the inventory names a NIC node2 does not have for HCCL (and GLOO, which uses the same)."""
    result = cli("launch", JOB, "--nodes", "2", "-i", inventory_copy(tmp_path, node2={"dapo_hccl_ifname": "eth9"}))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("dapo-ops: node2: dapo_hccl_ifname eth9: ") and "or set dapo_hccl_ip" in last, last
    assert "lock node1" not in result.stderr


def rehearse_with_env_script(fleet, node, edit):
    """`launch --rehearse-only` with `node`'s CANN environment script changed by the shell words `edit SCRIPT`
    (restored afterwards)."""
    from dapo_ops.layout import node_layout

    script = node_layout(fleet[node].vars).env_script
    sh(fleet[node], f"cp {script} {script}.orig && {edit} {script}")
    try:
        return cli("launch", JOB, "--nodes", "2", "--no-audit", "--rehearse-only")
    finally:
        sh(fleet[node], f"mv {script}.orig {script}")


def test_a_node_whose_ray_counts_fewer_npu_fails_the_launch_naming_it(fleet):
    """F13: node2's environment script makes its Ray count 8 NPU (Ray's RAY_OVERRIDE_RESOURCES, read by
    ray/_private/node.py when the node starts): the launch stops once both nodes are in, naming node2."""
    result = rehearse_with_env_script(fleet, "node2", "echo \"export RAY_OVERRIDE_RESOURCES='{\\\"NPU\\\": 8}'\" >>")
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "Ray counts other NPU totals than the 16 per node the job needs on node2 (" in last, last
    assert last.endswith("): 8: that node's Ray was started with other resources (a RAY_OVERRIDE_RESOURCES in its "
                         "environment, or a `ray start` by hand)"), last
    assert_torn_down(fleet)


def test_a_revoked_host_key_stops_even_a_forced_launch_before_any_node_is_touched(fleet, tmp_path):
    """Issue 15 (4): node2's key is marked @revoked in known_hosts; `--force --no-audit` still contacts every node
    first, so node1 is not locked, pushed to or stopped."""
    known = fleet["node1"].known_hosts
    node2_key = next(line.split()[2] for line in known.read_text().splitlines()
                     if line.startswith(fleet["node2"].address + " "))
    copy = tmp_path / "known_hosts"
    copy.write_text(f"@revoked * ssh-ed25519 {node2_key}\n" + known.read_text())
    args = f"-o UserKnownHostsFile={copy} -o StrictHostKeyChecking=yes"
    inventory = inventory_copy(tmp_path, node1={"ansible_ssh_common_args": args, "dapo_hccl_ip": "10.78.0.11"},
                               node2={"ansible_ssh_common_args": args, "dapo_hccl_ip": "10.78.0.12"})
    result = cli("launch", JOB, "--nodes", "2", "--no-audit", "--force", "-i", inventory)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"dapo-ops: node2 ({fleet['node2'].address}): its host key is marked @revoked in {copy} — refusing to connect")
    assert "check every node's host key" in result.stdout + result.stderr
    assert "lock node1" not in result.stdout + result.stderr
    for host in fleet.values():
        assert sh(host, "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def test_a_node_where_ray_survives_the_stop_stays_locked_and_fenced_until_a_later_stop(fleet, runs_dir, monkeypatch):
    """#26: `stop` removed the firewall table, the lock and the token even where Ray outlived three `ray stop`s,
    and exited 0. Now that node keeps all three, is named, the stop fails, and a later stop finishes."""
    from dapo_ops.job.render import firewall_table
    from dapo_ops.launch import cluster, locks
    from dapo_ops.launch import records
    from dapo_ops.launch.records import RunRecord, new_run_id, this_launcher

    # records read DAPO_OPS_RUNS_DIR when first imported, which in a whole-suite run is before this module's fixture
    monkeypatch.setattr(records, "RUNS_DIR", runs_dir)
    run_id = new_run_id("survivor")
    record = RunRecord(run_id=run_id, job="survivor", nodes=["node1", "node2"], head="node1",
                       head_address=fleet["node1"].address, dashboard="http://127.0.0.1:8265",
                       node_dir=cluster.node_dir(run_id), launcher=this_launcher())
    record.mark("starting")
    record.mark("running")
    nodes = [fleet["node1"], fleet["node2"]]
    locks.acquire(nodes, run_id)
    table = firewall_table(run_id)
    for host in nodes:
        sh(host, f"install -d -m 0700 {record.node_dir} && echo secret > {record.token_file} && "
                 f"nft add table inet {table}")
    # a root process Ray's own `ray stop --force` does not know, but dapo-ops counts as Ray (RAY_PROCESS_PATTERN)
    survivor = "/var/tmp/dapo-survivor/ray/_private/survivor.py"
    sh(fleet["node2"], f"mkdir -p {survivor.rsplit('/', 1)[0]} && echo 'import time; time.sleep(600)' > {survivor} && "
                       f"(nohup /usr/bin/python3 {survivor} >/dev/null 2>&1 &)")
    left = f"test -e {record.token_file} && test -e /var/lib/dapo-ops/cluster.lock && nft list table inet {table}"
    try:
        refused = cli("stop", run_id)
        assert refused.returncode == 1, refused.stderr
        assert "Ray is still up on node2, which keep the run's lock, token and firewall table" in refused.stderr
        assert "survivor.py" in refused.stderr and f"`dapo-ops stop {run_id}` retries" in refused.stderr
        assert sh(fleet["node2"], left, ok=False).exit_code == 0
        assert sh(fleet["node1"], f"test -e {record.token_file} || nft list table inet {table} || "
                                  "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code != 0
    finally:
        sh(fleet["node2"], "pkill -f '[d]apo-survivor' || true")
    finished = cli("stop", run_id)
    assert finished.returncode == 0, finished.stderr
    assert sh(fleet["node2"], f"test -e {record.token_file} || nft list table inet {table} || "
                              "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code != 0
    sh(fleet["node2"], "rm -rf /var/tmp/dapo-survivor")
