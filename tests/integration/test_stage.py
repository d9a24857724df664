"""`dapo-ops stage` on 3 simulated nodes with 200 Mbit/s links: the files pass from node to node and hash to the
source's on every node; a rerun sends nothing; a shard changed on one node (size and mtime kept) is found by its
hash and sent again; a node can be the source; a directory every node shares is written once; Ctrl-C leaves no
file under its name that is not whole; a bad source is refused before anything changes; nodes a firewall keeps
apart get their files from the controller; the run's keys and directories are gone afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dapo_ops.inventory import load_inventory
from dapo_ops.fleet.ssh import run_on
from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import FleetSpec
from dapo_sim.stage import job_files
from dapo_sim.staging import write_source

from .helpers import sigint_as_at_a_terminal

JOB = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
WEIGHTS = 40 << 20
SHARED = Path("/srv/dapo-stage-test")      # outside the nodes' private directories: one filesystem all nodes see


def job_at(tmp: Path, name: str, model: str, data_dir: str) -> Path:
    raw = yaml.safe_load(JOB.read_text())
    raw["model"]["path"] = model
    raw["data"]["train_files"] = f"{data_dir}/train.parquet"
    raw["data"]["val_files"] = f"{data_dir}/val.parquet"
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def fleet(sim, tmp_path_factory):
    state = sim.up(FleetSpec(nodes=3, link_mbit=200))
    tmp = tmp_path_factory.mktemp("stage")
    from dapo_ops.job.spec import load_spec

    job = job_at(tmp, "job", "/data/models/tiny", "/data/dapo-stage")
    spec = load_spec(job)
    files = job_files(spec, WEIGHTS)
    model_dir, data_dir = write_source(spec, files, tmp / "source")
    hosts = list(load_inventory(sim.inventory_file).hosts)
    yield {"sim": sim, "state": state, "tmp": tmp, "job": job, "files": files, "model": model_dir, "data": data_dir,
           "hosts": hosts, "inventory": sim.inventory_file}
    subprocess.run(["rm", "-rf", str(SHARED)], check=False)


def stage(fleet, *args, job=None, timeout=300):
    command = [sys.executable, "-m", "dapo_ops.cli", "stage", str(job or fleet["job"]), "-i", str(fleet["inventory"]),
               "--nodes", "3", "--json", *args]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout)
    return done, (json.loads(done.stdout) if done.returncode in (0, 1) and done.stdout.strip() else None)


def from_source(fleet):
    return ["--model-from", str(fleet["model"]), "--data-from", str(fleet["data"])]


def hashes(host, paths):
    out = run_on(host, "for f in " + " ".join(map(shlex.quote, paths)) +
                 '; do if [ -f "$f" ]; then sha256sum -- "$f"; else echo "missing $f"; fi; done').raise_for("hash")
    return {line.split(None, 1)[1].strip(): line.split()[0] for line in out.splitlines()}


def traces(host):
    """What a run could leave on a node: its directories, its keys, partial files."""
    out = run_on(host, "ls -d /tmp/dapo-stage.* 2>/dev/null; cat ~/.ssh/authorized_keys 2>/dev/null; "
                 "find /data -name '*.dapo-partial' 2>/dev/null").raise_for("look for traces")
    return out.strip()


def test_stage_sends_once_through_the_nodes_and_every_copy_hashes_to_the_source(fleet):
    before = {h.name: traces(h) for h in fleet["hosts"]}
    done, doc = stage(fleet, *from_source(fleet))
    assert done.returncode == 0, done.stderr
    assert doc["mode"] == "pipeline"
    total = sum(len(b) for b in fleet["files"].values())
    assert doc["sent_bytes"] == pytest.approx(total, rel=0.01)      # once, not once per node
    want = {path: hashlib.sha256(data).hexdigest() for path, data in fleet["files"].items()}
    for host in fleet["hosts"]:
        assert hashes(host, sorted(want)) == want, host.name
        assert doc["nodes"][host.name]["sent_files"] == len(want)
    assert {h.name: traces(h) for h in fleet["hosts"]} == before     # keys out, directories gone
    assert "overlong" in doc and doc["overlong"]["over"] > 0


def test_a_rerun_sends_nothing_and_a_changed_shard_is_sent_again(fleet):
    done, doc = stage(fleet, *from_source(fleet))
    assert done.returncode == 0 and doc["mode"] == "nothing to send" and doc["sent_bytes"] == 0
    shard = next(p for p in fleet["files"] if p.endswith(".safetensors"))
    node2 = fleet["hosts"][1]
    flip = ("import os,sys; p=sys.argv[1]; s=os.stat(p); f=open(p,'r+b'); f.seek(-1,2); b=f.read(1); f.seek(-1,2); "
            "f.write(bytes([b[0]^1])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))")
    run_on(node2, f"python3 -c {shlex.quote(flip)} {shlex.quote(shard)}").raise_for("change a shard")
    done, doc = stage(fleet, *from_source(fleet))
    assert done.returncode == 0, done.stderr
    sent = {name: node["sent_files"] for name, node in doc["nodes"].items() if node["sent_files"]}
    assert sent == {node2.name: 1}
    assert hashes(node2, [shard])[shard] == hashlib.sha256(fleet["files"][shard]).hexdigest()


def test_a_node_can_be_the_source(fleet):
    job = job_at(fleet["tmp"], "copy", "/data/models/tiny-copy", "/data/dapo-copy")
    done, doc = stage(fleet, "--model-from", "node1:/data/models/tiny", "--data-from", "node1:/data/dapo-stage",
                      job=job)
    assert done.returncode == 0, done.stderr
    want = {path.replace("/data/models/tiny/", "/data/models/tiny-copy/").replace("/data/dapo-stage/",
                                                                                  "/data/dapo-copy/"):
            hashlib.sha256(data).hexdigest() for path, data in fleet["files"].items()}
    for host in fleet["hosts"]:
        assert hashes(host, sorted(want)) == want, host.name


def test_a_directory_every_node_shares_is_written_once(fleet):
    job = job_at(fleet["tmp"], "shared", f"{SHARED}/model", f"{SHARED}/data")
    done, doc = stage(fleet, *from_source(fleet), job=job)
    assert done.returncode == 0, done.stderr
    assert sorted(doc["shared"]) == [f"{SHARED}/data", f"{SHARED}/model"]
    assert doc["sent_bytes"] == pytest.approx(sum(len(b) for b in fleet["files"].values()), rel=0.01)
    assert [doc["nodes"][h.name]["sent_files"] > 0 for h in fleet["hosts"]] == [True, False, False]
    assert "shared by every node" in done.stderr


def test_ctrl_c_leaves_no_file_under_its_name_that_is_not_whole_and_a_rerun_finishes(fleet):
    job = job_at(fleet["tmp"], "interrupted", "/data/models/interrupted", "/data/dapo-interrupted")
    command = [sys.executable, "-m", "dapo_ops.cli", "stage", str(job), "-i", str(fleet["inventory"]), "--nodes", "3",
               *from_source(fleet)]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=sigint_as_at_a_terminal)   # CI's runner ignores SIGINT (a background job)
    # interrupted once the last node is writing its first shard (the nodes' /data, as the controller sees it)
    receiving = Path(fleet["state"].nodes[-1].dir, "data", "models", "interrupted")
    deadline = time.monotonic() + 60
    while not list(receiving.glob(".*.safetensors.*.dapo-partial")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0, stderr
    want = {path.replace("/data/models/tiny/", "/data/models/interrupted/").replace("/data/dapo-stage/",
                                                                                    "/data/dapo-interrupted/"):
            hashlib.sha256(data).hexdigest() for path, data in fleet["files"].items()}
    missing = 0
    for host in fleet["hosts"]:
        found = hashes(host, sorted(want))
        assert all(sha == "missing" or sha == want[path] for path, sha in found.items()), (host.name, found)
        assert "dapo-stage" not in traces(host) and ".dapo-partial" not in traces(host), host.name
        missing += sum(sha == "missing" for sha in found.values())
    assert missing, "the interrupt came after the last file"
    done, doc = stage(fleet, *from_source(fleet), job=job)
    assert done.returncode == 0, done.stderr
    for host in fleet["hosts"]:
        assert hashes(host, sorted(want)) == want


def test_a_bad_source_is_refused_before_anything_changes(fleet, tmp_path):
    broken = tmp_path / "model"
    subprocess.run(["cp", "-r", str(fleet["model"]), str(broken)], check=True)
    shard = next(broken.glob("*.safetensors"))
    os.truncate(shard, shard.stat().st_size - 100)
    job = job_at(fleet["tmp"], "refused", "/data/models/refused", "/data/dapo-refused")
    done, _ = stage(fleet, "--model-from", str(broken), "--data-from", str(fleet["data"]), job=job)
    assert done.returncode == 2 and "nothing was copied" in done.stderr and "truncated" in done.stderr
    assert "Traceback" not in done.stderr
    for host in fleet["hosts"]:
        assert run_on(host, "test -e /data/models/refused || test -e /data/dapo-refused").exit_code == 1


def test_nodes_that_cannot_reach_each_other_get_their_files_from_the_controller(fleet):
    node1, node2 = fleet["state"].nodes[:2]
    rules = (f"add table inet stagetest; add chain inet stagetest input {{ type filter hook input priority 0; }}; "
             f"add rule inet stagetest input ip saddr {node1.ip} tcp dport 22 reject with tcp reset")
    subprocess.run(["ip", "netns", "exec", node2.netns, "nft", rules], check=True)
    try:
        job = job_at(fleet["tmp"], "direct", "/data/models/direct", "/data/dapo-direct")
        before = {h.name: traces(h) for h in fleet["hosts"]}
        done, doc = stage(fleet, *from_source(fleet), job=job)
    finally:
        subprocess.run(["ip", "netns", "exec", node2.netns, "nft", "delete table inet stagetest"], check=True)
    assert done.returncode == 0, done.stderr
    assert doc["mode"] == "direct" and "node2" in doc["why_direct"], doc["why_direct"]
    total = sum(len(b) for b in fleet["files"].values())
    assert doc["sent_bytes"] == pytest.approx(3 * total, rel=0.01)     # each node its own files, from the controller
    want = {path.replace("/data/models/tiny/", "/data/models/direct/").replace("/data/dapo-stage/",
                                                                               "/data/dapo-direct/"):
            hashlib.sha256(data).hexdigest() for path, data in fleet["files"].items()}
    for host in fleet["hosts"]:
        assert hashes(host, sorted(want)) == want, host.name
    assert {h.name: traces(h) for h in fleet["hosts"]} == before
