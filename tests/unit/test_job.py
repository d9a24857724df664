"""Job spec, render and validate: the seed's job is clean; broken specs fail with one line and exit 2, writing
nothing; hostile strings never execute; the seed's rendered files match the golden files byte for byte."""

import copy
import re
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.data.jobs.make_corpus import DELETE, apply_change
from dapo_ops.inventory import Host
from dapo_ops.job.overrides import hydra_value, overrides
from dapo_ops.job.placement import place
from dapo_ops.job.render import pick_nodes, render, write
from dapo_ops.job.spec import SpecError, parse_spec
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.ray_ports import DEFAULT_RAY_PORTS

DATA = Path(__file__).parent.parent / "data"
SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
INVENTORY = DATA / "inventory" / "two-nodes"
GOLDEN = DATA / "golden" / "qwen3-30b-a3b-dapo"


def shellcheck_available() -> bool:
    """CI installs shellcheck (scripts/bootstrap.sh); there its absence is a failure, not a skip."""
    found = shutil.which("shellcheck") is not None
    assert found or not os.environ.get("CI"), "shellcheck is missing (scripts/bootstrap.sh installs it)"
    return found


cli = run_cli


def seed() -> dict:
    return yaml.safe_load(SEED.read_text())


def test_seed_job_validates_clean():
    result = cli("validate", str(SEED), "-i", str(INVENTORY), "--json")
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    assert report["errors"] == [] and report["warnings"] == []
    assert 0 < report["hbm"]["actor_update_gib"] < 64 and report["hbm"]["rollout_full_sequences"] >= 1
    assert report["checkpoint"]["checkpoint_node_gib"] > 0
    # the shipped job saves every step: at the seed's throughput one step of its batch is over an hour
    assert report["checkpoint"]["save_freq"] == 1 and report["checkpoint"]["keep"] == 2
    assert report["checkpoint"]["step_seconds_estimate"] > 3600
    said = cli("validate", str(SEED), "-i", str(INVENTORY))
    assert "GiB per saved step" in said.stderr + said.stdout
    assert "saved every step (trainer.save_every_minutes 60 at an estimated" in said.stdout
    assert "the last 2 kept" in said.stdout


def on_eight(spec):
    """The spec placed on 8 NPUs per node, as launch and validate place it before its overrides are written."""
    import dataclasses

    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, npus_per_node=8))


def test_seed_overrides_use_the_pinned_verl_keys():
    spec = on_eight(parse_spec(seed()))
    pinned = overrides(spec, load_manifest())
    assert "reward_model.overlong_buffer.len=4096" in pinned and "data.gen_batch_size=1536" in pinned
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size=8" in pinned
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in pinned
    assert "trainer.logger=[console,file]" in pinned
    newer = overrides(spec, load_manifest(), verl_version="0.7.1")
    assert "reward.reward_kwargs.overlong_buffer_cfg.len=4096" in newer and not any(o.startswith("reward_model.") for o in newer)


def mutate(path, value):
    def apply(data):
        apply_change(data, path, value)
        return data
    return apply


BROKEN = [
    ("misspelled override key", mutate("extra_overrides", ["actor_rollout_ref.actor.ppo_micro_batch_size_per_npu=1"]),
     "did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'"),
    ("a config group given a number", mutate("extra_overrides", ["data=3"]),
     "verl's configuration rejects the overrides: Config group override must be a string or a list"),
    ("unknown spec field", mutate("actor.ulysses_sp", 8), "actor.ulysses_sp: unknown field"),
    ("SP not dividing the world", mutate("actor.ulysses_sequence_parallel_size", 7), "does not divide the world size 32"),
    ("gen < train batch", mutate("data.gen_batch_size", 256), "data.gen_batch_size 256 is smaller than"),
    ("SP without remove padding", mutate("model.use_remove_padding", False), "needs model.use_remove_padding"),
    ("3 nodes of a 2-node inventory", mutate("cluster.nodes", 3), "the job needs 3 node(s) but the inventory has 2"),
    ("rollout TP not dividing a node", mutate("rollout.tensor_parallel_size", 3), "does not divide"),
    ("sync rollout on verl 0.7", mutate("rollout.mode", "sync"), "rollout.mode 'sync' was removed"),
    ("too long for the model", mutate("data.max_response_length", 40000), "exceeds the model's max_position_embeddings"),
    ("mini batch larger than train batch", mutate("algorithm.ppo_mini_batch_size", 1024), "is larger than data.train_batch_size"),
    ("wrong type", mutate("data.train_batch_size", "lots"), "data.train_batch_size: expected a whole number"),
    ("missing required field", mutate("model.path", DELETE), "model.path: required field is missing"),
    ("relative path", mutate("data.train_files", "data/train.parquet"), "must be an absolute path"),
    ("newline in a path", mutate("model.path", "/data/x\n; rm -rf ~"), "model.path: contains the control character"),
    ("hostile job name", mutate("name", "$(touch /tmp/pwned)"), "name: '$(touch /tmp/pwned)' must be letters"),
    ("unlisted + key", mutate("extra_overrides", ["+trainer.surprise=1"]), "adds a key verl does not have"),
    ("npus per node not in the inventory", mutate("cluster.npus_per_node", 8), "inventory declares dapo_npus_per_node 16"),
    ("expandable segments with vLLM sleep mode", mutate("env.pytorch_npu_alloc_conf", "expandable_segments:True"),
     "Expandable segments are not compatible with memory pool"),
    ("TASK_QUEUE_ENABLE 2 in graph mode", mutate("env.task_queue_enable", 2), "needs TASK_QUEUE_ENABLE=1"),
    ("TASK_QUEUE_ENABLE through env.extra", mutate("env.extra", {"TASK_QUEUE_ENABLE": "2"}),
     "env.extra.TASK_QUEUE_ENABLE: set env.task_queue_enable instead"),
    ("graph mode switched off behind the spec's back", mutate("extra_overrides",
                                                             ["actor_rollout_ref.rollout.enforce_eager=True"]),
     "set rollout.enforce_eager in the spec instead"),
    ("relative checkpoint dir", mutate("trainer.checkpoint_dir", "ckpt"), "trainer.checkpoint_dir: 'ckpt' must be"),
    ("token budget below one sequence", mutate("actor.max_token_len_per_npu", 1024), "cannot hold one"),
    ("hostile env name", mutate("env.extra", {"X;touch /tmp/pwned": "1"}), "not an environment variable name"),
    ("boolean as string", mutate("actor.param_offload", "yes"), "actor.param_offload: expected true or false"),
    ("NZ with vLLM sleep mode", mutate("env.vllm_ascend_enable_nz", 1), "Please set VLLM_ASCEND_ENABLE_NZ=0"),
    ("HCCL connect timeout below CANN's range", mutate("env.hccl_connect_timeout", 60),
     "env.hccl_connect_timeout: 60 is outside HCCL_CONNECT_TIMEOUT's range [120, 7200] s"),
    ("HCCL exec timeout below CANN's range", mutate("env.hccl_exec_timeout", -1),
     "env.hccl_exec_timeout: -1 is outside HCCL_EXEC_TIMEOUT's range [0, 2147483647] s"),
    ("HCCL timeout through env.extra", mutate("env.extra", {"HCCL_CONNECT_TIMEOUT": "60"}),
     "env.extra.HCCL_CONNECT_TIMEOUT: set env.hccl_connect_timeout instead"),
    ("LD_PRELOAD through env.extra", mutate("env.extra", {"LD_PRELOAD": "/tmp/x.so"}),
     "env.extra.LD_PRELOAD: LD_PRELOAD changes what the root scripts that source env.sh load or run"),
    ("BASH_ENV through env.extra", mutate("env.extra", {"BASH_ENV": "/tmp/x.sh"}), "env.extra.BASH_ENV: BASH_ENV changes"),
    ("PATH through env.extra", mutate("env.extra", {"PATH": "/tmp:/usr/bin"}), "env.extra.PATH: PATH changes"),
    ("PYTHONPATH through env.extra", mutate("env.extra", {"PYTHONPATH": "/tmp"}), "env.extra.PYTHONPATH:"),
    ("plain-http wandb endpoint", mutate("env.extra", {"WANDB_BASE_URL": "http://wandb.example"}),
     "env.extra.WANDB_BASE_URL: 'http://wandb.example' is not an https:// URL, and the wandb key is sent there"),
    ("a '..' segment in a path", mutate("model.path", "/data/models/../../etc"),
     "model.path: '/data/models/../../etc' has a '..' segment"),
    ("rollout quantization no NPU stack supports", mutate("extra_overrides",
                                                         ["actor_rollout_ref.rollout.quantization=fp8"]),
     "actor_rollout_ref.rollout.quantization 'fp8' cannot work on the NPUs"),
]


# The mistakes `render` does not refuse: it checks the spec, its placement and the arithmetic
# (dapo_ops/cli/job.py render), not verl's composed configuration (keys, `+` keys, enforce_eager set behind the
# spec's back) nor the NPU environment checked against the composed rollout: those only `validate` (and launch) find.
RENDER_ACCEPTS = {"misspelled override key", "a config group given a number", "unlisted + key", "expandable segments with vLLM sleep mode",
                  "TASK_QUEUE_ENABLE 2 in graph mode", "TASK_QUEUE_ENABLE through env.extra",
                  "graph mode switched off behind the spec's back", "NZ with vLLM sleep mode",
                  "HCCL connect timeout below CANN's range", "HCCL exec timeout below CANN's range",
                  "HCCL timeout through env.extra", "rollout quantization no NPU stack supports"}


def test_render_accepts_names_broken_cases():
    assert RENDER_ACCEPTS <= {b[0] for b in BROKEN}


def refused_in_one_line(result, message):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("label, change, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_specs_fail_with_one_line_and_write_nothing(tmp_path, label, change, message):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(change(copy.deepcopy(seed()))))
    out = tmp_path / "out"
    refused_in_one_line(cli("validate", str(job), "-i", str(INVENTORY)), message)
    rendered = cli("render", str(job), "-i", str(INVENTORY), "-o", str(out))
    if label in RENDER_ACCEPTS:
        assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
        assert (out / "overrides.txt").is_file() and (out / "nodes" / "a2-node01" / "submit.sh").is_file()
    else:
        refused_in_one_line(rendered, message)
        assert not out.exists(), f"render failed but wrote {out}"
    assert not Path("/tmp/pwned").exists()


HOSTILE = ["$(touch {m})", "`touch {m}`", "'; touch {m}; '", "\"; touch {m}; \"", "; rm -rf ~ ; touch {m}",
           "$IFS;touch$IFS{m}", "a\\' ; touch {m} #"]


def hostile_spec(marker: Path, payload: str) -> dict:
    data = seed()
    bad = payload.format(m=marker)
    data["model"]["path"] = "/data/" + bad
    data["data"]["train_files"] = "/data/" + bad
    data["data"]["val_files"] = "/data/" + bad
    data["data"]["prompt_key"] = bad
    data["trainer"]["log_dir"] = str(marker.parent / "logs") + "/" + bad
    data["trainer"]["checkpoint_dir"] = str(marker.parent / "ckpt") + "/" + bad
    data["env"]["pytorch_npu_alloc_conf"] = bad
    data["env"]["extra"] = {"DAPO_TEST_VALUE": bad}
    data["algorithm"]["filter_groups"]["metric"] = bad
    data["algorithm"]["loss_agg_mode"] = bad
    data["extra_overrides"] = [f"trainer.default_local_dir={bad}"]
    return data


RAY_FIXED_PORTS = {port for port in DEFAULT_RAY_PORTS.values() if isinstance(port, int)}


def listener_outside_ray_ports() -> socket.socket:
    """A listening socket on a port the kernel picks that is not one of Ray's fixed ports (44217 and 44227 are in
    Linux's ephemeral range), which a spec's cluster.ray_port may not take."""
    held = []
    while True:
        server = socket.create_server(("127.0.0.1", 0))
        if server.getsockname()[1] not in RAY_FIXED_PORTS:
            for other in held:
                other.close()
            return server
        held.append(server)


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_strings_never_execute(tmp_path, payload):
    """Render with every free-text field hostile, then run the scripts for real against stub ray/python."""
    marker = tmp_path / "pwned"
    head_gcs = listener_outside_ray_ports()  # the worker's script waits for the head's GCS port
    data = hostile_spec(marker, payload)
    data["cluster"]["ray_port"] = head_gcs.getsockname()[1]
    # submit.sh sends the token only to root's Ray dashboard (dapo_ops/ray_listeners.py): a process that looks so
    dashboard_script = tmp_path / "ray" / "dashboard" / "dashboard.py"
    dashboard_script.parent.mkdir(parents=True)
    dashboard_script.write_text("import socket, time\ns = socket.create_server(('127.0.0.1', 0))\n"
                                "print(s.getsockname()[1], flush=True)\ntime.sleep(120)\n")
    while True:   # a port the kernel hands out may be one of Ray's other fixed ports, which the spec may not take
        dashboard = subprocess.Popen([sys.executable, str(dashboard_script)], stdout=subprocess.PIPE, text=True)
        data["cluster"]["dashboard_port"] = int(dashboard.stdout.readline())
        if data["cluster"]["dashboard_port"] not in RAY_FIXED_PORTS:
            break
        dashboard.kill()
        dashboard.wait()
    spec = parse_spec(data)
    root = tmp_path / "node"
    (root / "conda" / "envs" / "dapo" / "bin").mkdir(parents=True)
    (root / "src" / "verl").mkdir(parents=True)
    # the vendor environment puts its own directory first on PATH; a root command found there would be its code
    vendor = root / "vendor-bin"
    vendor.mkdir()
    for command in ("install", "mkdir", "pgrep", "nft", "timeout", "ss", "grep", "stat", "env"):
        (vendor / command).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (vendor / command).chmod(0o755)
    (root / "cann-env.sh").write_text(f"export DAPO_CANN_SOURCED=1 PATH={vendor}:$PATH\n")
    record = tmp_path / "calls"
    ray_paths = tmp_path / "ray-paths"
    stub = (f"#!/bin/bash\nprintf '%s\\0' \"$(basename \"$0\")\" \"$@\" >> {record}\n"
            f"printf '%s %s\\n' \"$1\" \"$PATH\" >> {ray_paths}\n")
    # like `ray job submit`: the words after `--` joined with subprocess.list2cmdline, run by /bin/sh
    ray_stub = stub + ('if [ "$1" = job ]; then shift; while [ "$1" != -- ]; do shift; done; shift; '
                       'exec sh -c "$(python3 -c \'import subprocess, sys; print(subprocess.list2cmdline(sys.argv[1:]))\' '
                       '"$@")"; fi\n')
    for name, body in (("ray", ray_stub), ("python", stub)):
        path = root / "conda" / "envs" / "dapo" / "bin" / name
        path.write_text(body)
        path.chmod(0o755)
    layout = {"stack_env_script": str(root / "cann-env.sh"), "stack_conda_prefix": str(root / "conda"),
              "stack_src_root": str(root / "src"), "dapo_hccl_ifname": "eth0", "dapo_npus_per_node": 16}
    hosts = [Host(f"n{i}", f"127.0.0.{i}", Path("/dev/null"), vars=layout) for i in (1, 2)]
    manifest = load_manifest()
    out = tmp_path / "out"
    spec, hosts = place(spec, hosts)
    write(render(spec, pick_nodes(hosts, manifest, {h.name: h.address for h in hosts}), manifest), out)
    scripts = sorted(out.glob("nodes/*/*.sh"))
    assert [s.relative_to(out).as_posix() for s in scripts] == [  # each one is checked below
        "nodes/n1/entrypoint.sh", "nodes/n1/env.sh", "nodes/n1/ray-start.sh", "nodes/n1/submit.sh", "nodes/n2/env.sh",
        "nodes/n2/ray-start.sh"]
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
        if shellcheck_available():
            # info-level notes (SC2016: "$(...)" does not expand in single quotes) are exactly the point here
            check = subprocess.run(["shellcheck", "-s", "bash", "-S", "warning", str(script)], capture_output=True,
                                   text=True)
            assert check.returncode == 0, check.stdout
    env = dict(os.environ, DAPO_SUBMISSION_ID="dapo-test-1", HOME=str(tmp_path))
    for script in ("nodes/n1/ray-start.sh", "nodes/n2/ray-start.sh", "nodes/n1/submit.sh"):
        run = subprocess.run(["bash", str(out / script)], env=env, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, (script, run.stderr)
    assert not marker.exists()  # no root command came from the vendor's directory
    started = [line.split(" ", 1) for line in ray_paths.read_text().splitlines()
               if line.split(" ")[0] in ("start", "job")]
    assert {verb for verb, _ in started} == {"start", "job"}  # Ray and the job get the environment's PATH back
    assert all(path.startswith(f"{vendor}:") for _, path in started), started
    calls = record.read_text().split("\0")
    bad = payload.format(m=marker)
    assert f"data.prompt_key={hydra_value(bad)}" in calls  # the hostile value arrived intact, as data
    sourced = subprocess.run(["bash", "-c", f"source {out / 'nodes/n1/env.sh'}; printf %s \"$DAPO_TEST_VALUE\""],
                             capture_output=True, text=True, env=env)
    assert sourced.stdout == bad and not marker.exists()
    head_gcs.close()
    dashboard.kill()
    dashboard.wait()


@pytest.mark.parametrize("value, problem", [
    ("x${oc.env:WANDB_API_KEY}", "contains '${', an OmegaConf interpolation"),
    ("${{IFS}}touch${{IFS}}x", "contains '${'"),
    ("a\x1b[31mred", "control character '\\x1b'"), ("tab\there", "control character '\\t'"),
    ("nul\x00", "control character '\\x00'"), ("del\x7f", "control character '\\x7f'")])
def test_interpolations_and_control_characters_are_refused_naming_the_field(value, problem):
    for field in ("data.prompt_key", "env.extra.DAPO_X", "algorithm.loss_agg_mode", "model.path"):
        with pytest.raises(SpecError, match=re.escape(f"{field}: ") + ".*" + re.escape(problem)):
            parse_spec(mutate(field, value)(seed()))


@pytest.mark.parametrize("field, value", [("name", "dapo\n"), ("trainer.experiment_name", "exp\n"),
                                          ("trainer.project_name", "p\n")])
def test_a_name_with_a_trailing_newline_is_refused(field, value):
    with pytest.raises(SpecError, match=field):
        parse_spec(mutate(field, value)(seed()))


@pytest.mark.parametrize("key", ["WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_PASSWORD",
                                 "GITHUB_TOKEN"])
def test_a_secret_in_env_extra_is_refused_and_never_rendered(key):
    with pytest.raises(SpecError, match=f"env.extra.{key}: looks like a secret.*list it under secrets.*0600 file"):
        parse_spec(mutate(f"env.extra.{key}", "sekrit")(seed()))
    assert parse_spec(mutate("env.extra.HCCL_BUFFSIZE", "200")(seed())).env.extra == {"HCCL_BUFFSIZE": "200"}


def test_render_is_byte_identical_and_matches_the_golden_files(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        result = cli("render", str(SEED), "-i", str(INVENTORY), "-o", str(out))
        assert result.returncode == 0, result.stderr
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    golden = sorted(p.relative_to(GOLDEN) for p in GOLDEN.rglob("*") if p.is_file())
    assert files == golden
    for rel in files:
        assert (first / rel).read_text() == (GOLDEN / rel).read_text(), (
            f"{rel} differs from the golden file; if the change is intended, re-render into {GOLDEN}")
    assert stat.S_IMODE((first / "nodes/a2-node01/submit.sh").stat().st_mode) == 0o755
    for script in first.glob("nodes/*/*.sh"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
        if shellcheck_available():
            check = subprocess.run(["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout


def test_no_secret_is_rendered(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "sekrit-value-123")
    data = seed()
    data["trainer"]["loggers"] = ["console", "wandb"]
    data["secrets"] = ["WANDB_API_KEY"]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(data))
    result = cli("render", str(job), "-i", str(INVENTORY), "-o", str(tmp_path / "out"),
                 env=dict(os.environ, WANDB_API_KEY="sekrit-value-123"))
    assert result.returncode == 0, result.stderr
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert "sekrit-value-123" not in path.read_text()
    no_key = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    refused = cli("validate", str(job), "-i", str(INVENTORY), env=no_key)
    assert refused.returncode == 2 and "secrets lists WANDB_API_KEY, which is not set" in refused.stderr


def test_render_reaches_no_node_and_a_node_without_an_inventory_address_reads_its_nic_at_start(tmp_path):
    """The example inventory (2 x 8 Atlas 800T A2) gives no dapo_hccl_ip and no node answers here."""
    example = PROJECT_ROOT / "inventory" / "example"
    out = tmp_path / "out"
    result = cli("render", str(SEED), "-i", str(example), "-o", str(out))
    assert result.returncode == 0, result.stderr
    head, worker = out / "nodes/a2-node01", out / "nodes/a2-node02"
    assert not (head / "ray-firewall.nft").exists()            # its peer set would need every node's address
    if shellcheck_available():
        for script in out.glob("nodes/*/*.sh"):
            check = subprocess.run(["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout
    fake = tmp_path / "bin"
    fake.mkdir()
    ip = fake / "ip"

    def source_env(node_dir: Path, address_line: str):
        ip.write_text(f"#!/bin/sh\nprintf '%s\\n' '{address_line}'\n")
        ip.chmod(0o755)
        work = tmp_path / node_dir.name
        shutil.copytree(node_dir, work, dirs_exist_ok=True)
        env_sh = work / "env.sh"                        # the CANN script is not on this machine: skip that line
        env_sh.write_text(re.sub(r"^source .*$", ":", env_sh.read_text(), count=1, flags=re.M))
        return work, subprocess.run(["bash", "-c", f'source {env_sh} && echo "HCCL_IF_IP=$HCCL_IF_IP"'],
                                    capture_output=True, text=True,
                                    env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))

    line = "2: enp189s0f0    inet 10.0.5.7/24 brd 10.0.5.255 scope global enp189s0f0\\       valid_lft forever"
    _, sourced = source_env(head, line)
    assert sourced.returncode == 0 and sourced.stdout.strip() == "HCCL_IF_IP=10.0.5.7", sourced.stderr
    work, sourced = source_env(head, "")
    assert sourced.returncode == 1
    assert "the HCCL NIC enp189s0f0 has no IPv4 address" in sourced.stderr
    ip.write_text("#!/bin/sh\necho '2: enp189s0f0    inet 10.0.5.7/24 brd 10.0.5.255 scope global enp189s0f0'\n")
    started = subprocess.run(["bash", str(work / "ray-start.sh")], capture_output=True, text=True,
                             env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    assert started.returncode == 1 and "this render has none for a2-node01, a2-node02" in started.stderr
    assert "s HCCL address is not in this render: set dapo_hccl_ip for a2-node01" in (worker / "ray-start.sh").read_text()
    unfenced = tmp_path / "unfenced"                         # no firewall: the head needs no other node's address
    shutil.copytree(example, unfenced)
    with open(unfenced / "group_vars" / "all.yml", "a") as extra:
        extra.write("\ndapo_ray_firewall: false\n")
    assert cli("render", str(SEED), "-i", str(unfenced), "-o", str(tmp_path / "out2")).returncode == 0
    script = (tmp_path / "out2/nodes/a2-node01/ray-start.sh").read_text()
    assert "--node-ip-address=\"$HCCL_IF_IP\"" in script and "this render has none" not in script


@pytest.mark.parametrize("change, code, message", [
    (mutate("env.vllm_ascend_enable_nz", 1), 2, "Please set VLLM_ASCEND_ENABLE_NZ=0"),
    (mutate("env.hccl_connect_timeout", 60), 2, "outside HCCL_CONNECT_TIMEOUT's range [120, 7200] s"),
    (mutate("rollout.gpu_memory_utilization", 0.9), 0, ""),
], ids=["nz-with-sleep", "hccl-timeout-60", "0.90"])
def test_the_example_inventory_2_x_8_refuses_knobs_that_cannot_work(tmp_path, change, code, message):
    """Issue 25's examples on the project's own example inventory (2 x Atlas 800T A2, no node reachable)."""
    job = tmp_path / "job.yaml"
    text = yaml.safe_dump(change(seed()))
    job.write_text(text.replace("gpu_memory_utilization: 0.9\n", "gpu_memory_utilization: 0.90\n"))
    result = cli("validate", str(job), "-i", str(PROJECT_ROOT / "inventory" / "example"), "--json")
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    if code == 0:
        import json

        report = json.loads(result.stdout)
        assert "gpu_memory_utilization: 0.90" in job.read_text()
        assert round(report["hbm"]["actor_update_gib"], 1) == 48.7 and round(report["host_mem_gib"]) == 458


def test_noset_is_a_boolean_true_exports_one_and_false_leaves_ray_to_set_the_devices(tmp_path):
    # Ray (`_private/accelerators/npu.py`) and verl (`verl/utils/ray_utils.py`) read any non-empty value as set
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(mutate("env.ray_noset_ascend_rt_visible_devices", False)(seed())))
    assert cli("render", str(job), "-i", str(INVENTORY), "-o", str(tmp_path / "off")).returncode == 0
    env_sh = (tmp_path / "off/nodes/a2-node01/env.sh").read_text()
    assert "export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES" not in env_sh
    assert "\nunset RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES\n" in env_sh
    on = (GOLDEN / "nodes/a2-node01/env.sh").read_text()
    assert "\nexport RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1\n" in on
    with pytest.raises(SpecError, match=r"env.ray_noset_ascend_rt_visible_devices: expected true or false, got 0"):
        parse_spec(mutate("env.ray_noset_ascend_rt_visible_devices", 0)(seed()))


def test_a_rendered_script_that_does_not_parse_is_refused_before_anything_is_written():
    from dapo_ops.job.render import RenderError, prove_scripts

    prove_scripts({"nodes/n1/ray-start.sh": "#!/bin/bash\nexec ray start --head\n", "overrides.txt": "if then\n"})
    with pytest.raises(RenderError, match=r"rendered nodes/n1/submit.sh does not parse as bash"):
        prove_scripts({"nodes/n1/submit.sh": "#!/bin/bash\nif [ -n x ]; then\n"})


def test_a_list_of_data_files_validates_and_reaches_verl_as_a_list(tmp_path):
    files = ["/data/dapo-math-17k.parquet", "/data/extra/more.parquet"]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(mutate("data.train_files", files)(seed())))
    result = cli("validate", str(job), "-i", str(INVENTORY), "--json")
    assert result.returncode == 0, result.stderr
    spec = on_eight(parse_spec(mutate("data.train_files", files)(seed())))
    assert f"data.train_files=[{','.join(files)}]" in overrides(spec, load_manifest())
    with pytest.raises(SpecError, match="data.train_files: 'relative.parquet' must be an absolute path"):
        parse_spec(mutate("data.train_files", [files[0], "relative.parquet"])(seed()))


def test_validate_needs_no_inventory_when_the_spec_pins_its_npus(tmp_path, monkeypatch):
    for name in ("DAPO_OPS_INVENTORY", "ANSIBLE_INVENTORY", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(mutate("cluster.npus_per_node", 16)(seed())))
    result = cli("validate", str(pinned), "--json")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["npus_per_node"] == 16
    unpinned = cli("validate", str(SEED))
    assert unpinned.returncode == 2 and "set cluster.npus_per_node in the spec" in unpinned.stderr


def test_render_writes_all_or_nothing(tmp_path):
    target = tmp_path / "out"
    assert cli("render", str(SEED), "-i", str(INVENTORY), "-o", str(target)).returncode == 0
    (target / "stale.txt").write_text("from an older render")
    assert cli("render", str(SEED), "-i", str(INVENTORY), "-o", str(target)).returncode == 0
    assert (target / "stale.txt").exists() and (target / "overrides.txt").exists()  # not ours: left alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging directory left
    blocked = cli("render", str(SEED), "-i", str(INVENTORY), "-o", "/proc/no-such-dir/out")
    assert blocked.returncode == 2 and "cannot write the rendered files to /proc/no-such-dir/out" in blocked.stderr
    (tmp_path / "file").write_text("x")
    assert "it is not a directory" in cli("render", str(SEED), "-i", str(INVENTORY), "-o", str(tmp_path / "file")).stderr


def test_a_phase_that_cannot_fit_in_hbm_is_refused_and_launch_runs_the_same_checks():
    from dapo_ops.errors import UsageError
    from dapo_ops.inventory import load_inventory
    from dapo_ops.launch.launch import plan

    manifest, inventory = load_manifest(), load_inventory(INVENTORY)
    huge = parse_spec(mutate("actor.max_token_len_per_npu", 200000)(seed()))
    with pytest.raises(UsageError, match=r"the actor update phase needs about \d+\.\d GiB per NPU, more than the 64 GiB"):
        plan(huge, inventory, manifest, 2)
    misspelled = parse_spec(mutate("extra_overrides", ["actor_rollout_ref.actor.ppo_micro_batch_size_per_npu=1"])(seed()))
    with pytest.raises(UsageError, match="did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'"):
        plan(misspelled, inventory, manifest, 2)  # launch composes verl's configuration too, before any node
    spec, hosts, checked = plan(parse_spec(seed()), inventory, manifest, 2)
    assert round(checked.host["host_mem_gib"]) == 717
    assert [h.name for h in hosts] == ["a2-node01", "a2-node02"] and spec.cluster.npus_per_node == 16


def test_names_are_matched_whole_not_up_to_a_trailing_newline():
    """The control-character rule refuses '\\n' in spec values first; the name rules must hold on their own too
    (env.extra keys reach them without passing the value rules)."""
    from dapo_ops.job import strings

    assert strings.is_name("dapo") and not strings.is_name("dapo\n")
    assert strings.is_env_name("HCCL_X") and not strings.is_env_name("HCCL_X\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a directory to another user (CI runs as root)")
def test_job_directories_are_root_only_and_never_under_a_place_another_user_can_write(tmp_path):
    """#26: verl's auto-resume torch.loads, as root, whatever checkpoint sits in its directory."""
    from dapo_ops.job.render import environment

    base = tmp_path / "jd"
    (base / "open").mkdir(parents=True)
    (base / "open").chmod(0o777)
    (base / "theirs").mkdir()
    os.chown(base / "theirs", 65534, 65534)

    def make(directory):
        script = environment().get_template("job-dirs.sh.j2").render(job_directories=[str(directory)])
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)

    made = make(base / "ok" / "ckpt")
    assert made.returncode == 0 and oct((base / "ok" / "ckpt").stat().st_mode & 0o777) == "0o700"
    for directory, holder in ((base / "open" / "ckpt", base / "open"), (base / "theirs" / "ckpt", base / "theirs"),
                              (base / "theirs", base / "theirs")):
        refused = make(directory)
        assert refused.returncode == 1 and f"{directory} is in {holder}" in refused.stderr
        assert "another user can write to" in refused.stderr
    assert not (base / "open" / "ckpt").exists() and not (base / "theirs" / "ckpt").exists()
    # a symbolic link on the way: another user's is refused (its owner could point it elsewhere later); root's is
    # followed, and where it leads is judged
    (base / "good").mkdir()
    (base / "theirs-link").symlink_to(base / "good")
    os.lchown(base / "theirs-link", 65534, 65534)
    refused = make(base / "theirs-link" / "ckpt")
    assert refused.returncode == 1 and f"goes through {base / 'theirs-link'}, a symbolic link of uid 65534" in refused.stderr
    (base / "root-link-to-open").symlink_to(base / "open")
    refused = make(base / "root-link-to-open" / "ckpt")
    assert refused.returncode == 1 and f"is in {base / 'open'} (owner uid 0, mode 777)" in refused.stderr
    (base / "root-link-to-good").symlink_to(base / "good")
    assert make(base / "root-link-to-good" / "ckpt").returncode == 0 and (base / "good" / "ckpt").is_dir()


def test_validate_falls_back_to_the_specs_numbers_when_the_configured_inventory_has_no_hosts(tmp_path, monkeypatch):
    """An exported ANSIBLE_INVENTORY whose fleet is down (no hosts.yml) does not stop an offline validate."""
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "groups.yml").write_text("all:\n  children:\n    npu_nodes: {}\n")
    monkeypatch.delenv("DAPO_OPS_INVENTORY", raising=False)
    monkeypatch.setenv("ANSIBLE_INVENTORY", str(tmp_path / "inv"))
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(mutate("cluster.npus_per_node", 16)(seed())))
    assert cli("validate", str(pinned), "--json").returncode == 0
    unpinned = cli("validate", str(SEED))
    assert unpinned.returncode == 2 and "has no hosts in group 'npu_nodes'" in unpinned.stderr
