"""Issue 15, items 1 and 2 (pure parts): Ray's pinned ports and the run's firewall table as rendered, and the job's
secret read on the controller and handed to the job as a netrc file path only."""

import netrc
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from dapo_ops.errors import InventoryError
from dapo_ops.inventory import Host
from dapo_ops.job.placement import place
from dapo_ops.job.render import firewall_table, pick_nodes, render
from dapo_ops.job.secrets import (SecretError, job_secrets, loggers, missing_secrets, netrc_text, read_secret,
                                  secret_files, wandb_machine)
from dapo_ops.job.spec import parse_spec
from dapo_ops.launch.teardown import leave_command
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.ray_ports import DEFAULT_RAY_PORTS, LOCAL, PEER, ray_ports

SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"


def spec_data(**cluster) -> dict:
    data = yaml.safe_load(SEED.read_text())
    data["cluster"].update(cluster)
    return data


def host(name: str, **extra) -> Host:
    return Host(name, f"192.0.2.{len(name)}", Path("/dev/null"),
                    vars={"dapo_npus_per_node": 16, "dapo_hccl_ifname": "eth1", **extra})


def rendered(data=None, addresses=None, attempt="job-1", **host_vars):
    manifest = load_manifest()
    spec, hosts = place(parse_spec(data or spec_data()), [host("a", **host_vars), host("b", **host_vars)])
    return render(spec, pick_nodes(hosts, manifest, addresses or {"a": "10.1.0.1", "b": "10.1.0.2"}), manifest,
                  attempt=attempt)


# ------------------------------------------------------------------------------------------------- Ray's ports

def test_every_port_has_a_default_and_is_either_peer_or_local():
    ports = ray_ports(None)
    assert set(PEER) | set(LOCAL) == set(DEFAULT_RAY_PORTS) and not set(PEER) & set(LOCAL)
    assert ports["gcs"] == 6379 and ports.span("workers") == (10002, 19999)
    assert ports.nft_set(PEER) == "6379, 6380, 6381, 6382, 10002-19999"


@pytest.mark.parametrize("given, message", [
    ({"gsc": 6379}, "dapo_ray_ports.gsc: not one of Ray's ports"),
    ({"node_manager": "7000-7010"}, "dapo_ray_ports.node_manager: '7000-7010' must be one port, not a range"),
    ({"workers": "20000-20010"}, "dapo_ray_ports.workers: 20000-20010 leaves fewer than 16 ports"),
    ({"object_manager": 10500}, "dapo_ray_ports.object_manager: 10500 is also dapo_ray_ports.workers"),
    ({"gcs": "x"}, "dapo_ray_ports.gcs: 'x' is not a port or a range FIRST-LAST"),
    ([6379], "dapo_ray_ports must be a mapping"),
])
def test_a_bad_port_map_is_refused_naming_the_key(given, message):
    with pytest.raises(InventoryError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        ray_ports(given)


def test_the_nodes_of_a_job_share_one_port_map_and_the_spec_ports_win():
    spec = parse_spec(spec_data(ray_port=7379))
    placed, _ = place(spec, [host("a"), host("b")])
    assert (placed.cluster.ray_port, placed.cluster.dashboard_port) == (7379, 8265)
    with pytest.raises(InventoryError, match="dapo_ray_ports differs between a and b"):
        place(parse_spec(spec_data()), [host("a"), host("b", dapo_ray_ports={"gcs": 7000})])
    with pytest.raises(InventoryError, match="cluster.dashboard_port: 6380 is also dapo_ray_ports.node_manager"):
        place(parse_spec(spec_data(dashboard_port=6380)), [host("a"), host("b")])


def test_ray_start_gets_every_pinned_port_and_loads_the_runs_table_first():
    files = rendered(dapo_ray_ports={"node_manager": 7380, "workers": "20000-20999"})
    head, worker = files["nodes/a/ray-start.sh"], files["nodes/b/ray-start.sh"]
    for script in (head, worker):
        for flag in ("--node-manager-port=7380", "--object-manager-port=6381", "--dashboard-agent-grpc-port=6382",
                     "--dashboard-agent-listen-port=52365", "--runtime-env-agent-port=6383",
                     "--metrics-export-port=6384", "--min-worker-port=20000", "--max-worker-port=20999"):
            assert flag in script, flag
        assert script.index("/ray-firewall.nft\"") < script.index(" start --")
    assert "--ray-client-server-port=10001" in head
    assert "export DASHBOARD_METRIC_PORT=44227 AUTOSCALER_METRIC_PORT=44217" in head
    assert "--dashboard-host=127.0.0.1" in head
    env = files["nodes/b/env.sh"]  # every Ray process and client of the node reads the run's token from its file
    assert "export RAY_AUTH_MODE=token\nexport RAY_AUTH_TOKEN_PATH=/var/lib/dapo-ops/runs/job-1/ray-token\n" in env
    table = files["nodes/b/ray-firewall.nft"]
    assert "elements = { 10.1.0.1, 10.1.0.2 }" in table
    assert "elements = { 6379, 7380, 6381, 6382, 20000-20999 }" in table
    assert "table inet dapo_ops_job_1 {" in table and "tcp dport @ray_peer counter drop" in table


def test_the_rendered_table_loads_in_nft(tmp_path):
    nft = "/usr/sbin/nft"
    if not os.path.exists(nft) or os.geteuid() != 0:
        pytest.skip("needs nft and root (`nft -c` parses against the kernel's netlink)")
    files = rendered(addresses={"a": "10.1.0.1", "b": "2001:db8::2"})
    path = tmp_path / "t.nft"
    path.write_text(files["nodes/a/ray-firewall.nft"])
    check = subprocess.run([nft, "-c", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "elements = { 2001:db8::2 }" in files["nodes/a/ray-firewall.nft"]


def test_the_firewall_can_be_turned_off_in_the_inventory():
    files = rendered(dapo_ray_firewall=False)
    assert "nodes/a/ray-firewall.nft" not in files and "nft -f" not in files["nodes/a/ray-start.sh"]
    assert "Ray's ports answer anyone" in files["nodes/a/ray-start.sh"]


def test_a_table_name_is_an_nft_identifier_and_leaving_removes_it_and_the_secret():
    assert firewall_table("qwen3-dapo-20261201T101010Z-ab12") == "dapo_ops_qwen3_dapo_20261201T101010Z_ab12"
    command = leave_command("run-1")
    removed = command.split(";")[0].split()
    assert removed[:3] == ["rm", "-f", "--"]
    assert {"/var/lib/dapo-ops/runs/run-1/ray-token", "/var/lib/dapo-ops/runs/run-1/wandb.netrc",
            "/var/lib/dapo-ops/runs/run-1/secrets.env"} <= set(removed[3:])
    assert "nft delete table inet dapo_ops_run_1" in command and command.endswith("true")


# ------------------------------------------------------------------------------------------------------ secrets

def wandb_spec(secrets=("WANDB_API_KEY",), **env_extra):
    data = spec_data()
    data["trainer"]["loggers"] = ["console", "wandb"]
    data["secrets"] = list(secrets)
    data.setdefault("env", {})["extra"] = env_extra
    return parse_spec(data)


def test_the_key_comes_from_the_environment_or_a_private_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("abc123\n")
    key_file.chmod(0o600)
    assert read_secret("WANDB_API_KEY", {"WANDB_API_KEY": "k1"}) == "k1"
    assert read_secret("WANDB_API_KEY", {"WANDB_API_KEY_FILE": str(key_file)}) == "abc123"
    assert read_secret("WANDB_API_KEY", {}) is None
    key_file.chmod(0o644)
    with pytest.raises(SecretError, match=r"readable by others \(mode 0644\): chmod 600"):
        read_secret("WANDB_API_KEY", {"WANDB_API_KEY_FILE": str(key_file)})
    with pytest.raises(SecretError, match="both WANDB_API_KEY and WANDB_API_KEY_FILE are set"):
        read_secret("WANDB_API_KEY", {"WANDB_API_KEY": "k", "WANDB_API_KEY_FILE": str(key_file)})
    with pytest.raises(SecretError, match="cannot read .*/missing"):
        read_secret("WANDB_API_KEY", {"WANDB_API_KEY_FILE": str(tmp_path / "missing")})
    with pytest.raises(SecretError, match="is one token"):
        read_secret("WANDB_API_KEY", {"WANDB_API_KEY": "two words"})


def test_validate_names_what_is_missing_and_launch_gets_the_key():
    spec = wandb_spec()
    assert missing_secrets(spec, {}) == ["secrets lists WANDB_API_KEY, which is not set in the environment "
                                         "(set it, or WANDB_API_KEY_FILE to a file holding it)"]
    assert job_secrets(spec, {"WANDB_API_KEY": "k"}) == {"WANDB_API_KEY": "k"}
    assert job_secrets(parse_spec(spec_data()), {"WANDB_API_KEY": "k"}) is None  # none listed: nothing pushed
    data = spec_data()
    data["extra_overrides"] = ["trainer.logger=[console,wandb]"]
    assert "wandb" in loggers(parse_spec(data))


def test_the_job_gets_only_the_secrets_its_spec_lists():
    """#26: a secret came from the controller's environment because a logger needed it; now only by the spec's
    explicit `secrets` list, which wandb's key must be on."""
    unlisted = wandb_spec(secrets=())
    needs = ("trainer.loggers has wandb, which needs WANDB_API_KEY: list it under secrets (the job gets only the "
             "secrets its spec lists)")
    assert missing_secrets(unlisted, {"WANDB_API_KEY": "k"}) == [needs]
    with pytest.raises(SecretError, match="list it under secrets"):
        job_secrets(unlisted, {"WANDB_API_KEY": "k"})
    data = spec_data()
    data["secrets"] = ["HF_TOKEN", "OPENAI_API_KEY", "HF_TOKEN"]
    assert missing_secrets(parse_spec(data), {"HF_TOKEN": "hf_x"}) == [
        "secrets: 'OPENAI_API_KEY' is not a secret dapo-ops hands to a job (WANDB_API_KEY, HF_TOKEN)",
        "secrets: HF_TOKEN is listed twice"]
    data["secrets"] = ["HF_TOKEN"]
    spec = parse_spec(data)
    env = {"HF_TOKEN": "hf_x", "WANDB_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "a"}
    assert job_secrets(spec, env) == {"HF_TOKEN": "hf_x"}        # nothing else from the environment
    assert secret_files(spec, {"HF_TOKEN": "hf_x"}) == {"hf-token": "hf_x\n"}


def test_the_netrc_file_is_what_wandb_reads_for_its_base_url(tmp_path):
    assert wandb_machine(wandb_spec()) == "api.wandb.ai"
    spec = wandb_spec(WANDB_BASE_URL="https://wandb.example.internal:8443")
    path = tmp_path / "netrc"
    path.write_text(netrc_text(spec, {"WANDB_API_KEY": "abc123"}))
    assert netrc.netrc(str(path)).authenticators("wandb.example.internal:8443")[2] == "abc123"
    with pytest.raises(SecretError, match="env.extra.WANDB_BASE_URL"):
        wandb_machine(wandb_spec(WANDB_BASE_URL="https://"))             # https, but no host to send the key to
    from dapo_ops.job.spec import SpecError

    for plain in ("not a url", "http://wandb.example.internal"):        # the spec refuses these first (issue 26)
        with pytest.raises(SpecError, match="env.extra.WANDB_BASE_URL: .* is not an https:// URL"):
            wandb_spec(WANDB_BASE_URL=plain)


def test_the_job_gets_the_files_path_never_the_key(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "sekrit-123")
    data = spec_data()
    data["trainer"]["loggers"] = ["console", "wandb"]
    data["secrets"] = ["WANDB_API_KEY", "HF_TOKEN"]
    files = rendered(data, attempt="run-9")
    runtime_env = yaml.safe_load(files["nodes/a/runtime_env.yaml"])
    assert runtime_env["env_vars"]["NETRC"] == "/var/lib/dapo-ops/runs/run-9/wandb.netrc"
    # huggingface_hub 0.36.0 reads the token from the file HF_TOKEN_PATH names (constants.py, utils/_auth.py)
    assert runtime_env["env_vars"]["HF_TOKEN_PATH"] == "/var/lib/dapo-ops/runs/run-9/hf-token"
    assert not any("sekrit-123" in text for text in files.values())
    assert not any("secrets.env" in text for text in files.values())
    plain = yaml.safe_load(rendered(attempt="run-9")["nodes/a/runtime_env.yaml"])
    assert "NETRC" not in plain["env_vars"] and "HF_TOKEN_PATH" not in plain["env_vars"]