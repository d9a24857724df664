"""NPUs per node from the inventory, the NPU environment derived from the job, the HCCL NIC's address, and where
the job writes: the shipped job on 2 x 8 (Atlas 800T A2) and 2 x 16 (Box16) inventories."""

import json
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli
from dapo_ops.errors import InventoryError
from dapo_ops.fleet.nic import inventory_address, parse_ipv4
from dapo_ops.inventory import Host
from dapo_ops.inventory import host_npus
from dapo_ops.job.npu_env import env_problems, task_queue_enable
from dapo_ops.job.overrides import overrides
from dapo_ops.job.placement import place
from dapo_ops.job.render import job_paths, pick_nodes, render
from dapo_ops.job.spec import SpecError, parse_spec
from dapo_ops.job.node_files import required_files
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT

DATA = Path(__file__).parent.parent / "data"
SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
INVENTORIES = {8: DATA / "inventory" / "two-a2-nodes", 16: DATA / "inventory" / "two-nodes"}


def seed(**changes) -> dict:
    data = yaml.safe_load(SEED.read_text())
    for path, value in changes.items():
        node = data
        *parents, last = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


def host(name: str, npus=16, **extra) -> Host:
    return Host(name, f"192.0.2.{len(name)}", Path("/dev/null"),
                    vars={"dapo_npus_per_node": npus, "dapo_hccl_ifname": "eth1", **extra})


cli = run_cli


def test_the_shipped_job_pins_no_npu_count():
    assert "npus_per_node" not in (seed().get("cluster") or {})


@pytest.mark.parametrize("npus", [8, 16])
def test_the_shipped_job_validates_on_both_products(npus):
    result = cli("validate", str(SEED), "-i", str(INVENTORIES[npus]), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["nodes"], report["npus_per_node"], report["errors"]) == (2, npus, [])
    assert 0 < report["hbm"]["actor_update_gib"] < 64


@pytest.mark.parametrize("npus", [8, 16])
def test_the_shipped_job_renders_for_the_inventorys_npus(tmp_path, npus):
    result = cli("render", str(SEED), "-i", str(INVENTORIES[npus]), "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    env = (tmp_path / "nodes/a2-node02/env.sh").read_text()
    assert f"export ASCEND_RT_VISIBLE_DEVICES={','.join(map(str, range(npus)))}\n" in env
    assert f"""--resources='{{"NPU": {npus}}}'""" in (tmp_path / "nodes/a2-node02/ray-start.sh").read_text()
    assert f"trainer.n_gpus_per_node={npus}\n" in (tmp_path / "overrides.txt").read_text()


def test_world_size_follows_the_inventory():
    spec, hosts = place(parse_spec(seed()), [host("a", 8), host("b", 8)])
    assert (spec.cluster.nodes, spec.cluster.npus_per_node) == (2, 8)
    assert "trainer.n_gpus_per_node=8" in overrides(spec, load_manifest())
    with pytest.raises(SpecError, match="cluster.npus_per_node is 16 but the inventory declares dapo_npus_per_node 8"):
        place(parse_spec(seed(cluster__npus_per_node=16)), [host("a", 8), host("b", 8)])


@pytest.mark.parametrize("value, message", [
    (None, "a: no dapo_npus_per_node in the inventory"), ("eight", "'eight', not a whole number"), (True, "not a whole number"),
    (0, "it must be positive"), ("", "a: no dapo_npus_per_node in the inventory")])
def test_a_bad_npus_per_node_is_named(value, message):
    with pytest.raises(InventoryError, match=message):
        host_npus(host("a", value))


def test_npus_per_node_as_a_string_is_read():
    assert host_npus(host("a", " 8 ")) == 8


def test_nodes_of_two_kinds_are_refused_but_only_among_the_chosen():
    mixed = [host("a", 16), host("b", 8), host("c", 16)]
    with pytest.raises(InventoryError, match="different dapo_npus_per_node .a 16, b 8"):
        place(parse_spec(seed()), mixed)
    spec, chosen = place(parse_spec(seed(cluster__head="c")), [host("c", 16), host("a", 16), host("b", 8)])
    assert [h.name for h in chosen] == ["c", "a"] and spec.cluster.npus_per_node == 16


def test_the_head_goes_first_and_must_exist():
    spec, chosen = place(parse_spec(seed(cluster__head="b")), [host("a"), host("b"), host("c")])
    assert [h.name for h in chosen] == ["b", "a"]
    with pytest.raises(SpecError, match="cluster.head: 'z' is not in the inventory"):
        place(parse_spec(seed(cluster__head="z")), [host("a"), host("b")])


def test_task_queue_follows_graph_mode():
    assert task_queue_enable(parse_spec(seed())) == 1
    assert task_queue_enable(parse_spec(seed(rollout__enforce_eager=True))) == 2
    assert env_problems(parse_spec(seed(rollout__enforce_eager=True, env__task_queue_enable=2)), None) == []


def test_expandable_segments_only_refused_where_sleep_mode_is_on():
    spec = parse_spec(seed(env__pytorch_npu_alloc_conf="expandable_segments:True"))
    assert any("Expandable segments are not compatible" in p for p in env_problems(spec, None))
    asleep_off = {"actor_rollout_ref": {"rollout": {"name": "vllm", "enable_sleep_mode": False,
                                                    "enforce_eager": False}}}
    assert env_problems(spec, asleep_off) == []
    fine = parse_spec(seed(env__pytorch_npu_alloc_conf="max_split_size_mb:250"))
    assert env_problems(fine, None) == []


def test_nz_is_refused_only_with_sleep_mode_and_hccl_timeouts_at_cann_range_edges_pass():
    nz = parse_spec(seed(env__vllm_ascend_enable_nz=1))
    assert any("FRACTAL_NZ mode is enabled" in p for p in env_problems(nz, None))
    asleep_off = {"actor_rollout_ref": {"rollout": {"name": "vllm", "enable_sleep_mode": False,
                                                    "enforce_eager": False}}}
    assert env_problems(nz, asleep_off) == []
    edges = parse_spec(seed(env__hccl_connect_timeout=120, env__hccl_exec_timeout=0))
    assert env_problems(edges, None) == []
    high = parse_spec(seed(env__hccl_connect_timeout=7201, env__hccl_exec_timeout=2147483648))
    assert [p.split(":")[0] for p in env_problems(high, None)] == ["env.hccl_connect_timeout", "env.hccl_exec_timeout"]


def test_env_sh_leaves_the_allocator_alone_and_derives_the_task_queue():
    manifest = load_manifest()
    spec, hosts = place(parse_spec(seed()), [host("a"), host("b")])
    files = render(spec, pick_nodes(hosts, manifest, {"a": "10.1.0.1", "b": "10.1.0.2"}), manifest, attempt="run-7")
    env = files["nodes/a/env.sh"]
    assert "export TASK_QUEUE_ENABLE=1\n" in env and "unset PYTORCH_NPU_ALLOC_CONF\n" in env
    assert "expandable_segments" not in env.replace("expandable_segments:True breaks", "")


def test_hccl_address_is_the_nic_address_not_the_ssh_address():
    manifest = load_manifest()
    spec, hosts = place(parse_spec(seed()), [host("a"), host("b")])
    files = render(spec, pick_nodes(hosts, manifest, {"a": "10.1.0.1", "b": "10.1.0.2"}), manifest)
    assert "export HCCL_IF_IP=10.1.0.2\n" in files["nodes/b/env.sh"]
    worker = files["nodes/b/ray-start.sh"]
    assert "--address=10.1.0.1:6379" in worker and "--node-ip-address=10.1.0.2" in worker
    assert hosts[1].address not in worker
    assert "--node-ip-address=10.1.0.1" in files["nodes/a/ray-start.sh"]


def test_ip_addr_output_and_inventory_addresses():
    text = ("3: data0    inet 10.78.0.11/24 brd 10.78.0.255 scope global data0\\       valid_lft forever\n"
            "3: data0    inet 10.78.0.99/24 scope global secondary data0\\       valid_lft forever\n")
    assert parse_ipv4(text) == ["10.78.0.11", "10.78.0.99"]
    assert parse_ipv4("") == []
    assert inventory_address(host("a", dapo_hccl_ip="10.0.0.5")) == "10.0.0.5"
    assert inventory_address(host("a")) is None
    with pytest.raises(InventoryError, match="a: dapo_hccl_ip '10.0.0.300' is not an IPv4 address"):
        inventory_address(host("a", dapo_hccl_ip="10.0.0.300"))


def test_every_node_makes_the_directories_the_job_writes_and_each_attempt_has_its_own_metrics_file():
    manifest = load_manifest()
    spec, hosts = place(parse_spec(seed()), [host("a"), host("b")])
    first, second = job_paths(spec, "run-1"), job_paths(spec, "run-2")
    assert first.file_logger != second.file_logger and first.file_logger.endswith("/metrics-run-1.jsonl")
    files = render(spec, pick_nodes(hosts, manifest, {"a": "10.1.0.1", "b": "10.1.0.2"}), manifest, attempt="run-1")
    for node in ("a", "b"):
        script = files[f"nodes/{node}/ray-start.sh"]
        made = next(line for line in script.splitlines() if line.startswith("for dapo_dir in "))
        assert 'install -d -m 0700 -- "$dapo_dir"' in script
        for directory in first.directories():
            assert directory in made.removesuffix("; do").split()
    assert str(Path(first.file_logger).parent) in first.directories()
    assert f"trainer.default_local_dir={first.checkpoints}" in overrides(spec, manifest)
    assert first.checkpoints.startswith("/")


def test_the_rehearsal_checks_the_model_and_data_files():
    spec = parse_spec(seed())
    assert set(required_files(spec)) == {spec.data.train_files, spec.data.val_files}
    from dapo_ops.launch.rehearsal import config

    manifest = load_manifest()
    nodes = pick_nodes(place(spec, [host("a"), host("b")])[1], manifest, {"a": "10.1.0.1", "b": "10.1.0.2"})
    assert config(spec, nodes, "tcp")["model_dir"] == "/data/models/Qwen3-30B-A3B"   # checked on every node


@pytest.mark.parametrize("nodes", [0, -1])
def test_a_non_positive_node_count_is_refused(nodes):
    with pytest.raises(SpecError, match=f"cluster.nodes is {nodes}; it must be a positive number"):
        place(parse_spec(seed(cluster__nodes=nodes)), [host("a"), host("b")])
    with pytest.raises(SpecError, match=f"--nodes is {nodes}; it must be a positive number"):
        place(parse_spec(seed()), [host("a"), host("b")], nodes)


def test_every_problem_of_the_job_hosts_is_reported_at_once_the_head_first():
    bad = [host("a", 16, dapo_hccl_ifname="eth0; reboot"), host("b", "sixteen"), host("c", 16)]
    with pytest.raises(InventoryError) as caught:
        place(parse_spec(seed(cluster__head="b")), bad)
    message = str(caught.value)
    assert message.index("b: dapo_npus_per_node is 'sixteen'") < message.index("a: dapo_hccl_ifname 'eth0; reboot'")
    assert "c:" not in message  # not one of the job's 2 hosts
