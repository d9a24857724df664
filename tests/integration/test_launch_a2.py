"""The shipped DAPO job on two simulated Atlas 800T A2 servers (8 NPUs each, managed on one network and training on
another), and the upstream behaviours of verl / vllm-ascend that the simulated stack reproduces and the job relies
on: verl's TaskRunner on a node other than the head, its file logger, vllm-ascend's sleep-mode allocator and graph
mode. Each check names the upstream file it pins."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stack.artifacts import bundle_name
from dapo_sim.fleet import DATA_NIC, DATA_SUBNET, FleetSpec

from dapo_ops.fleet.ssh import Failure, run_on

from .ansible_helpers import playbook
from .helpers import hosts, sh

JOB = "jobs/qwen3-30b-a3b-dapo.yaml"
ENV = "/opt/miniconda3/envs/dapo"


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


pytestmark = pytest.mark.usefixtures("runs_dir")  # run records in a temporary directory (conftest)


PASSPHRASE = "typed-into-ssh-add-only"


@pytest.fixture(scope="module")
def agent_key(tmp_path_factory):
    """A controller key with a passphrase, held by an ssh-agent of this module's own (SSH_AUTH_SOCK is set for
    every command the tests run, as an operator's shell has it): Ansible and dapo-ops authenticate with the agent."""
    home = tmp_path_factory.mktemp("agent")
    key, sock, askpass = home / "id_ed25519", home / "agent.sock", home / "askpass"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", PASSPHRASE, "-C", "dapo-test", "-f", str(key)],
                   check=True)
    agent = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True)
    agent_pid = int(re.search(r"SSH_AGENT_PID=(\d+)", agent.stdout).group(1))
    askpass.write_text(f"#!/bin/sh\necho {PASSPHRASE}\n")
    askpass.chmod(0o700)
    added = subprocess.run(["ssh-add", str(key)], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, SSH_AUTH_SOCK=str(sock), SSH_ASKPASS=str(askpass),
                                    SSH_ASKPASS_REQUIRE="force", DISPLAY=":0"))
    assert added.returncode == 0, added.stderr
    before = os.environ.get("SSH_AUTH_SOCK")
    os.environ["SSH_AUTH_SOCK"] = str(sock)
    yield key
    os.environ.pop("SSH_AUTH_SOCK")
    if before is not None:
        os.environ["SSH_AUTH_SOCK"] = before
    os.kill(agent_pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def fleet(sim, tmp_path_factory, agent_key):
    """Two A2 servers with the pinned HDK and CANN already on them (`sim up --provisioned`: a fresh install with its
    reboot is test_provision's subject), then the whole of site.yml, which finds those layers in place. The sources
    come as git bundles from the artifact mirror, with no git server reachable (issue 28: test_provision clones from
    the git server), and the OS packages the nodes lack from a directory the controller pushes. The nodes are reached
    as a site without root login reaches them (issue 28 (5)): through a jump host, as a user with sudo, with a
    passphrase key that only ssh-agent holds open; site.yml, the launch and every command of this module go that
    way."""
    sim.down()
    sim.up(FleetSpec(nodes=2, npus_per_node=8, provisioned=True, ssh_user="dapo", bastion=True,
                     ssh_key=str(agent_key)))
    no_git_server = tmp_path_factory.mktemp("inv") / "bundles.yml"
    no_git_server.write_text("all:\n  vars:\n    dapo_git_bundles: true\n"
                             "    dapo_git_base_url: http://127.0.0.1:9/no-git-server\n"
                             "    dapo_os_packages_source: local\n"
                             f"    dapo_os_packages_dir: {sim.mirror_root / 'os-packages'}\n")
    rc, output, _ = playbook(extra_inventory=no_git_server)
    assert rc == 0, output[-3000:]
    # the OS packages the nodes lacked, from the directory the controller pushed (test_os_packages has the details)
    assert sh(hosts()["node2"], "dpkg-query -W -f '${db:Status-Status}' dkms").stdout == "installed"
    origins = sh(hosts()["node2"], "for d in /opt/dapo-ops/src/*/; do git -C $d remote get-url origin; done").stdout
    assert sorted(origins.split()) == sorted(
        "file:///var/cache/dapo-ops/artifacts/" + bundle_name(s.repo, s.ref).removesuffix(".bundle") + ".git"
        for s in load_manifest().sources.values()), origins
    staged = subprocess.run([sys.executable, "-m", "dapo_sim", "stage", JOB], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=600)
    assert staged.returncode == 0, staged.stderr
    return hosts()


def test_the_nodes_are_reached_only_through_the_jump_host_as_the_sudo_user_with_the_agent_s_key(fleet, agent_key):
    node1 = fleet["node1"]
    assert node1.user == "dapo" and node1.become_user == "root" and len(node1.jumps) == 1
    assert sh(node1, "id -un").stdout.strip() == "root"                            # through sudo
    assert sh(replace(node1, become_user=None), "id -un").stdout.strip() == "dapo"  # the login itself
    for direct in (replace(node1, jumps=()), replace(node1, jumps=(), user="root", become_user=None),
                   replace(node1, user="root", become_user=None)):
        refused = run_on(direct, "true", timeout=30)
        assert refused.failure is Failure.UNREACHABLE, (direct, refused)
        assert f"{direct.user} was not let in" in refused.error
    without_agent = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json"], cwd=PROJECT_ROOT,
                                   capture_output=True, text=True, timeout=300,
                                   env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"})
    assert without_agent.returncode != 0
    assert f"the key {agent_key} has a passphrase and ssh-agent offers no key" in (without_agent.stdout +
                                                                                    without_agent.stderr)


def wait_for_job(run_id, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        status = cli("status", run_id, "--json")
        state = json.loads(status.stdout)["ray_job_status"] if status.stdout else None
        if state in ("SUCCEEDED", "FAILED", "STOPPED") or time.monotonic() > deadline:
            return state, status
        time.sleep(3)


def in_env(host, code, env=""):
    """Python in the provisioned env on a node, with the CANN environment sourced (as the job's processes are)."""
    command = (f"source /usr/local/Ascend/dapo-ops-env.sh && {env} {ENV}/bin/python -c {shlex.quote(code)}")
    return sh(host, f"bash -c {shlex.quote(command)}", ok=False)


def test_the_shipped_job_validates_and_runs_on_2_x_8_with_its_taskrunner_on_node2(fleet, runs_dir):
    validated = cli("validate", JOB, "--json")
    assert validated.returncode == 0, validated.stderr
    assert json.loads(validated.stdout)["npus_per_node"] == 8
    launched = cli("launch", JOB, "--nodes", "2", "--json")
    assert launched.returncode == 0, launched.stderr
    record = json.loads(launched.stdout)
    run_id = record["run_id"]
    try:
        assert record["rehearsal"]["hosts"] == {"node1": 8, "node2": 8}
        # HCCL and Ray on the training network, not on the address SSH uses
        assert record["head_address"] == f"{DATA_SUBNET}.11" != fleet["node1"].address
        env_sh = (runs_dir / run_id / "rendered/nodes/node2/env.sh").read_text()
        assert f"export HCCL_IF_IP={DATA_SUBNET}.12\n" in env_sh and f"HCCL_SOCKET_IFNAME={DATA_NIC}\n" in env_sh
        assert "export TASK_QUEUE_ENABLE=1\n" in env_sh and "unset PYTORCH_NPU_ALLOC_CONF" in env_sh
        state, status = wait_for_job(run_id)
        logs = cli("logs", run_id).stdout
        assert state == "SUCCEEDED", status.stdout + status.stderr + logs[-3000:]
        assert "n_gpus_per_node=8" in logs and "TaskRunner on node2" in logs and "TaskRunner hostname: node2" in logs
        # verl's file logger wrote this attempt's metrics on node2, where the TaskRunner ran
        metrics = f"/var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo/metrics-{run_id}.jsonl"
        line = json.loads(sh(fleet["node2"], f"cat {metrics}").stdout.splitlines()[0])
        assert line["step"] == 0 and line["data"]["dapo_ops/n_gpus_per_node"] == 8
        # verl's data path ran for real on node2 (datasets.load_dataset, the tokenizer's chat template): the staged
        # 320 training rows, 8 of them longer than data.max_prompt_length, which the job does not filter
        data = line["data"]
        assert (data["dapo_ops/train_rows"], data["dapo_ops/train_rows_overlong"],
                data["dapo_ops/train_rows_filtered"], data["dapo_ops/val_rows"]) == (320, 8, 0, 30), data
        assert "dapo_ops/train_rows:320" in logs and "dataset len: 320" in logs
        for host in fleet.values():  # every directory the job writes exists on every node
            sh(host, "test -d /var/lib/dapo-ops/checkpoints/verl-dapo/qwen3-30b-a3b-dapo && "
                     "test -d /var/log/dapo-ops/jobs/verl-dapo/qwen3-30b-a3b-dapo/tensorboard")

        # doctor (issue 16): a job whose TaskRunner runs on node2, where the train file is gone, fails; doctor
        # collects the run's logs from both nodes and names node2 and the missing data as the cause
        head_dir = f"/var/lib/dapo-ops/runs/{run_id}"
        train = "/data/dapo/dapo-math-17k.parquet"
        sh(fleet["node2"], f"mv {train} {train}.hidden")
        try:
            runtime = json.dumps({"env_vars": {"DAPO_SIM_TASKRUNNER_NODE": "node2"}})
            submit = (f"source {head_dir}/env.sh && {ENV}/bin/ray job submit --address=http://127.0.0.1:8265 "
                      f"--runtime-env-json {shlex.quote(runtime)} -- bash {head_dir}/entrypoint.sh")
            failed = sh(fleet["node1"], f"bash -c {shlex.quote(submit)}", timeout=240, ok=False)
            assert failed.exit_code != 0 and f"Unable to find '{train}'" in failed.stdout + failed.stderr
        finally:
            sh(fleet["node2"], f"mv {train}.hidden {train}")
        doctor = cli("doctor", run_id, "--json")
        assert doctor.returncode == 1, doctor.stdout[-2000:] + doctor.stderr
        root = json.loads(doctor.stdout)["root"]
        assert (root["node"], root["signature"]) == ("node2", "verl-data-or-model-missing"), root
        bundle = runs_dir / run_id / "doctor"
        assert (bundle / "node1").is_dir() and (bundle / "node2").is_dir()

        # issue 24: the train file corrupt on node2 (cut short, as an interrupted copy leaves it): the job fails with
        # pyarrow's own error through datasets, and doctor names node2 and the file
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))  # past the missing-file failure
        sh(fleet["node2"], f"cp -p {train} {train}.good && truncate -s 4096 {train}")
        try:
            failed = sh(fleet["node1"], f"bash -c {shlex.quote(submit)}", timeout=240, ok=False)
        finally:
            sh(fleet["node2"], f"mv {train}.good {train}")
        assert failed.exit_code != 0 and "Parquet magic bytes not found in footer" in failed.stdout + failed.stderr
        doctor = cli("doctor", run_id, "--since", since, "--json")
        assert doctor.returncode == 1, doctor.stdout[-2000:] + doctor.stderr
        root = json.loads(doctor.stdout)["root"]
        assert (root["node"], root["signature"]) == ("node2", "verl-data-file-unreadable"), root
        assert train in json.dumps(root), root

        # verl v0.7.0 verl/utils/tracking.py FileLogger: open(VERL_FILE_LOGGER_PATH, "w"), no directory made
        runtime = json.dumps({"env_vars": {"VERL_FILE_LOGGER_PATH": "/var/log/nowhere/metrics.jsonl",
                                           "DAPO_SIM_TASKRUNNER_NODE": "node2"}})
        submit = (f"source {head_dir}/env.sh && {ENV}/bin/ray job submit --address=http://127.0.0.1:8265 "
                  f"--runtime-env-json {shlex.quote(runtime)} -- bash {head_dir}/entrypoint.sh")
        failed = sh(fleet["node1"], f"bash -c {shlex.quote(submit)}", timeout=240, ok=False)
        assert failed.exit_code != 0
        assert "No such file or directory: '/var/log/nowhere/metrics.jsonl'" in failed.stdout + failed.stderr
    finally:
        stopped = cli("stop", run_id)
        assert stopped.returncode == 0, stopped.stderr


def test_a_node_without_the_model_fails_the_rehearsal_naming_it(fleet):
    config = "/data/models/Qwen3-30B-A3B/config.json"
    sh(fleet["node2"], f"mv {config} {config}.hidden")
    try:
        result = cli("launch", JOB, "--nodes", "2", "--rehearse-only", "--no-audit")
    finally:
        sh(fleet["node2"], f"mv {config}.hidden {config}")
    assert result.returncode == 1
    assert (f"rehearsal failed: rank 8 on node2: {config} is missing: the model's config.json (model.path) must be "
            "on every node") in result.stderr


def test_vllm_ascend_refuses_expandable_segments_with_sleep_mode(fleet):
    """vllm-ascend v0.11.0rc1 vllm_ascend/device_allocator/camem.py CaMemAllocator.__init__, reached from
    vllm_ascend/worker/worker_v1.py NPUWorker.load_model when enable_sleep_mode (verl's default)."""
    code = ("from vllm_ascend.worker.worker_v1 import NPUWorker\n"
            "NPUWorker(enable_sleep_mode=True, enforce_eager=True).load_model()\n")
    refused = in_env(fleet["node1"], code, "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True")
    assert refused.exit_code == 1
    assert "AssertionError: Expandable segments are not compatible with memory pool" in refused.stderr
    assert in_env(fleet["node1"], code, "PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:250").exit_code == 0
    no_sleep = code.replace("enable_sleep_mode=True", "enable_sleep_mode=False")
    assert in_env(fleet["node1"], no_sleep, "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True").exit_code == 0


def test_graph_mode_refuses_task_queue_2(fleet):
    """verl's Ascend notes (docs/ascend_tutorial/ascend_optimization_pratice/gspo_optimization_practice.md): with
    ACL graph on, TASK_QUEUE_ENABLE must be 1 "or it errors". The notes quote no error text, so the stand-in's
    message is the simulator's own; what is pinned here is that graph mode refuses 2 and eager mode takes it."""
    code = ("from vllm_ascend.worker.worker_v1 import NPUWorker\n"
            "NPUWorker(enable_sleep_mode=False, enforce_eager=False).load_model()\n")
    refused = in_env(fleet["node1"], code, "TASK_QUEUE_ENABLE=2")
    assert refused.exit_code == 1 and "TASK_QUEUE_ENABLE=2 is not supported in graph mode" in refused.stderr
    assert in_env(fleet["node1"], code, "TASK_QUEUE_ENABLE=1").exit_code == 0
    eager = code.replace("enforce_eager=False", "enforce_eager=True")
    assert in_env(fleet["node1"], eager, "TASK_QUEUE_ENABLE=2").exit_code == 0


def test_a_job_with_expandable_segments_is_refused_before_any_change(fleet, tmp_path):
    import yaml

    job = yaml.safe_load((PROJECT_ROOT / JOB).read_text())
    job["env"]["pytorch_npu_alloc_conf"] = "expandable_segments:True"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    for command in (("validate", str(path)), ("launch", str(path), "--nodes", "2")):
        result = cli(*command)
        assert result.returncode == 2 and "Expandable segments are not compatible with memory pool" in result.stderr
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


@pytest.mark.parametrize("filter_overlong", [False, True])
def test_the_dry_mode_data_path_runs_on_the_nodes_own_libraries(fleet, filter_overlong):
    """The stand-in entry point's load_data (verl's TaskRunner.run and RLHFDataset calls) on the staged files, in the
    provisioned env of node1 with its locked datasets, pyarrow, transformers and tokenizers: the rows, the overlong
    prompts (filtered only when data.filter_overlong_prompts asks), the staged tokenizer's chat template; then a
    truncated copy of the train file fails with pyarrow's own error, as datasets raises it."""
    from dapo_ops.job.spec import load_spec

    spec = load_spec(PROJECT_ROOT / JOB)
    train, val = spec.data.train_files, spec.data.val_files
    cut = "/tmp/dapo-cut.parquet"
    config = {"actor_rollout_ref": {"model": {"path": spec.model.path}},
              "data": {"train_files": train, "val_files": val, "prompt_key": "prompt",
                       "max_prompt_length": spec.data.max_prompt_length, "filter_overlong_prompts": filter_overlong,
                       "filter_overlong_prompts_workers": 1, "truncation": "left", "apply_chat_template_kwargs": {}}}
    code = f"""
import json, shutil, sys
sys.path.insert(0, "/opt/dapo-ops/src/verl/recipe/dapo")
import main_dapo
config = json.loads({json.dumps(json.dumps(config))})
data = main_dapo.load_data(config)
prompt = data["tokenizer"].apply_chat_template(data["val"][0]["prompt"], add_generation_prompt=True, tokenize=False)
print("RESULT " + json.dumps({{"metrics": data["metrics"], "layers": data["model_config"].num_hidden_layers,
                              "head": prompt[:20], "tail": prompt[-40:], "kept": len(data["train"])}}))
shutil.copy(config["data"]["train_files"], {cut!r})
with open({cut!r}, "r+b") as fh:
    fh.truncate(5000)
config["data"]["train_files"] = {cut!r}
main_dapo.load_data(config)
"""
    run = in_env(fleet["node1"], code, env="HF_HUB_OFFLINE=1")
    sh(fleet["node1"], f"rm -f {cut}")
    result = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    dropped = 8 if filter_overlong else 0
    # the staged checkpoint's tensors, listed through the node's real safetensors (dapo_sim/checkpoint.py: the
    # embeddings, 8 layers' q_proj, the head)
    assert result["metrics"] == {"dapo_ops/weight_tensors": 10,
                                 "dapo_ops/train_rows": 320, "dapo_ops/train_rows_overlong": 8,
                                 "dapo_ops/train_rows_filtered": dropped, "dapo_ops/val_rows": 30,
                                 "dapo_ops/val_rows_overlong": 0, "dapo_ops/val_rows_filtered": 0}, result
    assert result["layers"] == spec.model.architecture.layers and result["kept"] == 320 - dropped
    assert result["head"].startswith("<|im_start|>user\n")
    assert result["tail"].endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "dataset len: 320" in run.stdout and ("filter dataset len: 312" in run.stdout) == filter_overlong
    assert run.exit_code != 0
    assert ("pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file is corrupted or "
            "this is not a parquet file.") in run.stderr, run.stderr[-2000:]
    assert f"Failed to read schema from '{cut}' with error ArrowInvalid" in run.stderr

