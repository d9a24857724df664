import configparser
from pathlib import Path

import pytest

from dapo_ops.errors import InventoryError
from dapo_ops.inventory import load_inventory, parse_inventory
from dapo_ops.paths import INVENTORY_DIR


def test_example_inventory_describes_a_real_cluster():
    inventory = load_inventory(INVENTORY_DIR / "example")
    assert inventory.names() == ["a2-node01", "a2-node02"]
    node = inventory.hosts[0]
    assert (node.address, node.user, node.port) == ("192.0.2.11", "root", 22)
    assert node.known_hosts == Path("~/.ssh/known_hosts").expanduser()
    assert node.key_file == Path("~/.ssh/dapo_ops_ed25519").expanduser()
    assert node.vars["dapo_npus_per_node"] == 8
    assert node.vars["dapo_hccl_ifname"] == "enp189s0f0"
    assert len(node.vars["dapo_device_ips"]) == 8


def test_missing_and_empty_inventories(tmp_path):
    with pytest.raises(InventoryError, match="does not exist"):
        load_inventory(tmp_path / "nope")
    with pytest.raises(InventoryError, match="no hosts in group 'npu_nodes'"):
        parse_inventory({"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}}, tmp_path)
    bad = tmp_path / "hosts.yml"
    bad.write_text("all: [unbalanced\n")
    with pytest.raises(InventoryError, match="not usable"):
        load_inventory(bad)


def test_limit():
    inventory = load_inventory(INVENTORY_DIR / "example")
    assert inventory.limit(["a2-node02"]).names() == ["a2-node02"]
    with pytest.raises(InventoryError, match="not in the inventory: nodeX"):
        inventory.limit(["nodeX"])


def test_parse_recap():
    from dapo_ops.recap import parse_recap

    output = """PLAY RECAP *********************************************************************
node1                      : ok=66   changed=0    unreachable=0    failed=0    skipped=31   rescued=0    ignored=0
node2                      : ok=12   changed=3    unreachable=0    failed=1    skipped=2    rescued=0    ignored=0
"""
    recap = parse_recap("TASK [x]\nok: [node1]\n" + output)
    assert recap["node1"]["changed"] == 0 and recap["node1"]["ok"] == 66
    assert recap["node2"]["failed"] == 1 and recap["node2"]["changed"] == 3
    assert parse_recap("no recap here") == {}


HOSTS = """npu_nodes:
  hosts:
    node1: {{ansible_host: 10.0.0.1, dapo_npus_per_node: {npus}}}
"""


def test_a_static_inventory_is_cached_until_a_file_changes(tmp_path, monkeypatch):
    from dapo_ops import inventory_cache

    monkeypatch.setattr(inventory_cache, "CACHE_DIR", tmp_path / "cache")
    source = tmp_path / "inv"
    source.mkdir()
    (source / "hosts.yml").write_text(HOSTS.format(npus=8))
    assert load_inventory(source).hosts[0].vars["dapo_npus_per_node"] == 8
    cached = list((tmp_path / "cache").glob("*.json"))
    assert len(cached) == 1 and cached[0].stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    (source / "group_vars").mkdir()
    (source / "group_vars" / "all.yml").write_text("dapo_hccl_ifname: eth9\n")
    assert load_inventory(source).hosts[0].vars["dapo_hccl_ifname"] == "eth9"
    (source / "hosts.yml").write_text(HOSTS.format(npus=16))
    assert load_inventory(source).hosts[0].vars["dapo_npus_per_node"] == 16
    assert len(list((tmp_path / "cache").glob("*.json"))) == 3


def test_dynamic_inventories_are_never_cached(tmp_path):
    from dapo_ops.inventory_cache import cache_key

    plugin = tmp_path / "aws_ec2.yml"
    plugin.write_text("plugin: amazon.aws.aws_ec2\nregions: [eu-west-1]\n")
    assert cache_key(plugin) is None
    script = tmp_path / "inventory.py"
    script.write_text("#!/bin/sh\necho '{}'\n")
    script.chmod(0o755)
    assert cache_key(tmp_path) is None
    script.chmod(0o644)
    plugin.unlink()
    assert cache_key(tmp_path) is not None


SEED_JOB = Path(__file__).parents[2] / "jobs" / "qwen3-30b-a3b-dapo.yaml"
GOOD_HOST = "{ansible_host: 192.0.2.11, dapo_hccl_ifname: eth0, dapo_npus_per_node: 16}"


@pytest.mark.parametrize("text, message", [
    ("npu_nodes: [unclosed\n", "is not usable"),
    ("npu_nodes:\n  hosts:\n    n1: {ansible_host: 192.0.2.11, dapo_hccl_ifname: eth0, dapo_npus_per_node: lots}\n"
     f"    n2: {GOOD_HOST}\n", "n1: dapo_npus_per_node is 'lots', not a whole number"),
    ("npu_nodes:\n  hosts:\n    n1: {ansible_host: 192.0.2.11, dapo_hccl_ifname: eth0, npus_per_node: 16}\n"
     f"    n2: {GOOD_HOST}\n", "n1: npus_per_node is now called dapo_npus_per_node"),
    ("npu_nodes:\n  hosts:\n    n1: {ansible_host: 192.0.2.11, dapo_npus_per_node: 16}\n"
     f"    n2: {GOOD_HOST}\n", "n1: no dapo_hccl_ifname in the inventory"),
    ("npu_nodes:\n  hosts:\n    n1: {ansible_host: 192.0.2.11, dapo_hccl_ifname: eth0, dapo_npus_per_node: 16, "
     "ansible_port: twenty}\n", "host 'n1': the SSH port 'twenty' (ansible_port, -p or Port) is not a number"),
    ("other_group:\n  hosts:\n    n1: {}\n", "has no hosts in group 'npu_nodes'"),
    ("\xff\xfe not utf-8", "is not usable"),
])
def test_a_broken_inventory_is_one_line_and_exit_2(tmp_path, text, message):
    from tests.cli_runner import run_cli

    inventory = tmp_path / "hosts.yml"
    inventory.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    result = run_cli("validate", str(SEED_JOB), "-i", str(inventory))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr


def raw_inventory(hosts: dict) -> dict:
    return {"_meta": {"hostvars": hosts}, "all": {"children": ["npu_nodes"]}, "npu_nodes": {"hosts": list(hosts)}}


@pytest.mark.parametrize("name", ["../../x", "node1/evil", "..", "node 1", "-rf", "n" * 65, "node\n1"])
def test_a_host_name_that_is_not_a_plain_name_is_refused_naming_it(tmp_path, name):
    with pytest.raises(InventoryError) as err:
        parse_inventory(raw_inventory({name: {"ansible_host": "10.0.0.1"}}), tmp_path)
    assert f"host {name!r}: the host name is not a plain name" in str(err.value)


def test_every_command_refuses_an_unknown_dapo_variable_naming_the_closest(tmp_path):
    """The typo a site makes (dapo_pip_index for dapo_pip_index_url) would otherwise be ignored everywhere."""
    with pytest.raises(InventoryError) as err:
        parse_inventory(raw_inventory({"node1": {"dapo_npus_per_node": 8, "dapo_pip_index": "http://m/simple"}}),
                        tmp_path)
    assert str(err.value) == (f"inventory {tmp_path}: host 'node1': dapo_pip_index is not a dapo-ops inventory "
                              "variable (did you mean dapo_pip_index_url?)")
    site_own = parse_inventory(raw_inventory({"node1": {"dapo_npus_per_node": 8, "site_rack": "r12"}}), tmp_path)
    assert site_own.hosts[0].vars["site_rack"] == "r12"   # a site's own variables are its business


@pytest.mark.parametrize("value, message", [
    ("{{ cycler.__init__.__globals__.os.system('touch /tmp/pwned') }}", "is a template; only"),
    ("{{ lookup('pipe', 'id') }}", "is a template; only"),
    ("{% for x in y %}/opt{% endfor %}", "is a template; only"),
    ("{{ dapo_secret }}/x", "refers to a variable that is not a stack_* setting"),
    ("relative/path", "is not an absolute path"),
    ("/opt/a\nb", "contains a control character"),
])
def test_stack_values_are_data_never_templates(tmp_path, value, message):
    marker = Path("/tmp/pwned")
    marker.unlink(missing_ok=True)
    with pytest.raises(InventoryError) as err:
        parse_inventory(raw_inventory({"node1": {"stack_env_prefix": value}}), tmp_path)
    assert "host 'node1': stack_env_prefix: " in str(err.value) and message in str(err.value)
    assert not marker.exists()


def test_plain_references_between_stack_values_still_resolve(tmp_path):
    from dapo_ops.layout import node_layout

    inventory = parse_inventory(raw_inventory({"node1": {"stack_conda_prefix": "/data/conda",
                                                         "stack_src_root": "{{ stack_conda_prefix }}/src"}}), tmp_path)
    layout = node_layout(inventory.hosts[0].vars)
    assert (layout.python, layout.src_root) == ("/data/conda/envs/dapo/bin/python", "/data/conda/src")


def _inventory_dir(tmp_path, extra_vars=""):
    directory = tmp_path / "inv"
    directory.mkdir()
    (directory / "hosts.yml").write_text(
        "all:\n  children:\n    npu_nodes:\n      hosts:\n        n1: {ansible_host: 192.0.2.1}\n"
        "  vars:\n    dapo_npus_per_node: 8\n" + extra_vars)
    return directory


def test_an_executable_inventory_file_is_refused_and_never_run(tmp_path, monkeypatch):
    """#26: any executable file in an inventory directory ran when Ansible's script plugin loaded it."""
    monkeypatch.delenv("DAPO_OPS_INVENTORY_SCRIPTS", raising=False)
    marker = tmp_path / "ran"
    directory = _inventory_dir(tmp_path)
    script = directory / "dynamic.py"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"npu_nodes\": {{\"hosts\": [\"n2\"]}}}}'\n")
    script.chmod(0o755)
    with pytest.raises(InventoryError, match=r"inventory file .*dynamic.py is executable: Ansible would run it"):
        load_inventory(directory)
    with pytest.raises(InventoryError, match="is executable"):
        load_inventory(script)
    assert not marker.exists()
    monkeypatch.setenv("DAPO_OPS_INVENTORY_SCRIPTS", "1")  # the opt-in: a dynamic inventory is run
    assert sorted(load_inventory(directory).names()) == ["n1", "n2"] and marker.exists()


def test_an_executable_group_vars_file_is_only_read(tmp_path, monkeypatch):
    monkeypatch.delenv("DAPO_OPS_INVENTORY_SCRIPTS", raising=False)
    directory = _inventory_dir(tmp_path)
    (directory / "group_vars").mkdir()
    (directory / "group_vars" / "all.yml").write_text("dapo_hccl_ifname: eth9\n")
    (directory / "group_vars" / "all.yml").chmod(0o755)
    assert load_inventory(directory).hosts[0].vars["dapo_hccl_ifname"] == "eth9"


@pytest.mark.parametrize("value", ["\"{{ lookup('pipe', 'touch /tmp/x') }}\"", "[a, \"{% raw %}x{% endraw %}\"]",
                                   "{inner: \"{{ 1 }}\"}"])
def test_a_templated_dapo_value_is_refused_naming_host_and_variable(tmp_path, value):
    directory = _inventory_dir(tmp_path, f"    dapo_hccl_ifname: {value}\n")
    with pytest.raises(InventoryError, match=r"host 'n1': dapo_hccl_ifname holds a template .*Ansible would "
                                             r"evaluate it on the controller"):
        load_inventory(directory)


def test_ansible_reads_yaml_and_ini_inventories_only():
    config = configparser.ConfigParser()
    config.read(INVENTORY_DIR.parent / "ansible.cfg")
    assert [p.strip() for p in config["inventory"]["enable_plugins"].split(",")] == ["yaml", "ini"]


def test_without_i_the_inventory_is_dapo_ops_or_ansibles_configured_one_else_a_clear_error(tmp_path, monkeypatch):
    from dapo_ops.errors import InventoryError
    from dapo_ops.inventory import resolve_inventory

    for name in ("DAPO_OPS_INVENTORY", "ANSIBLE_INVENTORY", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)   # no ansible.cfg here, none of the checkout's
    monkeypatch.setenv("HOME", str(tmp_path))
    if not Path("/etc/ansible/ansible.cfg").exists():
        with pytest.raises(InventoryError, match=r"no inventory: pass -i INVENTORY, or set DAPO_OPS_INVENTORY"):
            resolve_inventory(None)
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = /srv/site/inventory\n")
    assert resolve_inventory(None) == Path("/srv/site/inventory")
    monkeypatch.setenv("ANSIBLE_INVENTORY", "/srv/other")
    assert resolve_inventory(None) == Path("/srv/other")
    monkeypatch.setenv("ANSIBLE_INVENTORY", "/srv/a,/srv/b")
    with pytest.raises(InventoryError, match="configured with 2 inventories"):
        resolve_inventory(None)
    monkeypatch.setenv("DAPO_OPS_INVENTORY", "/srv/mine")
    assert resolve_inventory(None) == Path("/srv/mine")
    assert resolve_inventory("inventory/x") == Path("inventory/x")


@pytest.mark.parametrize("exported", ["/srv/site/inventory", "inventory/sim", "./a/../b", " spaced/inv ",
                                      "~/inv", "$DAPO_TEST_DIR/inv", "${DAPO_TEST_DIR}/x/", "/srv//double/"])
def test_an_exported_ansible_inventory_resolves_as_ansible_resolves_it(exported, tmp_path, monkeypatch):
    from ansible.config.manager import ConfigManager

    from dapo_ops.inventory import configured_inventory

    monkeypatch.delenv("DAPO_OPS_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAPO_TEST_DIR", "/srv/from-env")
    monkeypatch.setenv("ANSIBLE_INVENTORY", exported)
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = /srv/not-this-one\n")
    sources, origin = ConfigManager().get_config_value_and_origin("DEFAULT_HOST_LIST")
    assert origin == "env: ANSIBLE_INVENTORY"
    assert configured_inventory() == Path(sources[0])


def test_the_checkout_configures_no_inventory():
    """The product has no default inventory, least of all the simulator's."""
    config = configparser.ConfigParser()
    config.read(INVENTORY_DIR.parent / "ansible.cfg")
    assert "inventory" not in config["defaults"]


def test_a_host_parses_its_variables_on_first_use_naming_host_and_variable():
    from dapo_ops.errors import InventoryError
    from dapo_ops.inventory import Host

    good = Host("n1", "192.0.2.1", Path("/dev/null"), vars={"dapo_npus_per_node": "16", "stack_conda_prefix": "/srv/c"})
    assert good.npus == 16
    assert good.layout.python.startswith("/srv/c/")      # the env follows an overridden conda prefix
    assert good.layout is good.layout                    # parsed once
    bad = Host("n2", "192.0.2.2", Path("/dev/null"), vars={"dapo_npus_per_node": "sixteen"})
    assert bad.layout.python                              # a bad variable does not stop the others
    with pytest.raises(InventoryError, match=r"^n2: dapo_npus_per_node is 'sixteen', not a whole number$"):
        bad.npus
