"""Issue 28 (5): a host's SSH settings read from the inventory as Ansible hands them to OpenSSH (its connection
variables, the -o options of ansible_ssh_common_args / ansible_ssh_extra_args, then the ssh config file), so one set
of variables serves Ansible and dapo-ops."""

import getpass
import shlex
from pathlib import Path

import paramiko
import pytest

from dapo_ops.errors import InventoryError
from dapo_ops.fleet.ssh_config import Endpoint, as_become_user, command_line_options, ssh_settings
from dapo_ops.inventory import parse_inventory

CONFIG = """
Host bastion
  HostName 198.51.100.7
  User jumper
  Port 2222
  IdentityFile /keys/jump
  UserKnownHostsFile /etc/jump_known_hosts

Host inner
  HostName 10.0.0.2
  ProxyJump bastion

Host 192.0.2.*
  User fromconfig
  UserKnownHostsFile /etc/site_known_hosts
"""


def config_of(text=CONFIG):
    return lambda path: paramiko.SSHConfig.from_text(text)


def settings(host_vars, text=CONFIG, name="node1"):
    return ssh_settings(name, host_vars, config_loader=config_of(text))


def test_the_options_of_the_command_line_are_read_first_value_wins():
    options, config = command_line_options(
        "-C -o UserKnownHostsFile=/k -oStrictHostKeyChecking=yes -o 'User other' -o User=second -J j@h:2 "
        "-F /cfg -p 2200 -c aes128-ctr -i /key", "host 'n'")
    assert options == {"userknownhostsfile": "/k", "stricthostkeychecking": "yes", "user": "other",
                       "proxyjump": "j@h:2", "port": "2200", "identityfile": "/key"}
    assert config == Path("/cfg")


def test_an_argument_missing_its_value_or_a_broken_quote_is_named():
    with pytest.raises(InventoryError, match="end with -o and no value"):
        command_line_options("-o", "host 'n'")
    with pytest.raises(InventoryError, match="host 'n': its SSH arguments do not parse"):
        command_line_options("-o 'User=x", "host 'n'")


def test_ansible_variables_come_before_the_arguments_which_come_before_the_config_file():
    found = settings({"ansible_host": "192.0.2.5", "ansible_user": "admin", "ansible_port": 2201,
                      "ansible_ssh_private_key_file": "/keys/node",
                      "ansible_ssh_common_args": "-o User=ignored -o UserKnownHostsFile=/inv/known_hosts"})
    assert found.target == Endpoint("192.0.2.5", "admin", 2201, Path("/keys/node"), Path("/inv/known_hosts"))
    assert found.jumps == () and found.become_user is None
    from_config = settings({"ansible_host": "192.0.2.5"})
    assert from_config.target == Endpoint("192.0.2.5", "fromconfig", 22, None, Path("/etc/site_known_hosts"))


def test_nothing_set_is_openssh_s_default_the_local_user_and_the_user_known_hosts():
    found = settings({"ansible_host": "203.0.113.9"})
    assert found.target == Endpoint("203.0.113.9", getpass.getuser(), 22, None,
                                    Path("~/.ssh/known_hosts").expanduser())


def test_a_jump_host_takes_its_own_settings_from_the_config_file_as_openssh_does():
    found = settings({"ansible_host": "192.0.2.5", "ansible_ssh_common_args": "-o ProxyJump=bastion"})
    assert found.jumps == (Endpoint("198.51.100.7", "jumper", 2222, Path("/keys/jump"),
                                    Path("/etc/jump_known_hosts")),)
    chain = settings({"ansible_host": "192.0.2.5", "ansible_ssh_extra_args": "-J ops@gw1:2022,[2001:db8::1]:23"})
    assert [(j.address, j.user, j.port) for j in chain.jumps] == [("gw1", "ops", 2022),
                                                                 ("2001:db8::1", getpass.getuser(), 23)]
    via_config = settings({"ansible_host": "inner"})
    assert via_config.target.address == "10.0.0.2" and via_config.jumps[0].address == "198.51.100.7"
    assert settings({"ansible_host": "inner", "ansible_ssh_common_args": "-o ProxyJump=none"}).jumps == ()


@pytest.mark.parametrize("host_vars, text, message", [
    ({"ansible_ssh_common_args": "-o ProxyCommand='nc %h %p'"}, "", "ProxyCommand is not followed by dapo-ops"),
    ({"ansible_ssh_common_args": "-o ProxyJump=inner"}, CONFIG, "jump host inner has a ProxyJump of its own"),
    ({"ansible_ssh_common_args": "-o 'UserKnownHostsFile=/a /b'"}, "", "UserKnownHostsFile names 2 files"),
    ({"ansible_port": "ssh"}, "", r"the SSH port 'ssh' \(ansible_port, -p or Port\) is not a number"),
    ({"ansible_ssh_common_args": "-J @:22"}, "", "ProxyJump entry '@:22' names no host"),
    ({"ansible_become": True, "ansible_become_method": "su"}, "", "through sudo only"),
    ({"ansible_become": "perhaps"}, "", "ansible_become"),
])
def test_what_dapo_ops_cannot_follow_is_refused_naming_host_and_setting(host_vars, text, message):
    with pytest.raises(InventoryError, match=message) as raised:
        settings(host_vars, text)
    assert "node1" in str(raised.value)


def test_become_runs_commands_through_sudo_without_a_password_prompt():
    assert settings({"ansible_become": "yes"}).become_user == "root"
    assert settings({"ansible_become": True, "ansible_become_user": "svc"}).become_user == "svc"
    assert settings({"ansible_become": False, "ansible_become_user": "svc"}).become_user is None
    assert as_become_user("echo 'a b' && id -u", None) == "echo 'a b' && id -u"
    assert shlex.split(as_become_user("echo 'a b' && id -u", "root")) == [
        "sudo", "-n", "-H", "-u", "root", "--", "/bin/bash", "-c", "echo 'a b' && id -u"]


def test_the_inventory_gives_each_host_its_jumps_and_become_and_refuses_the_retired_known_hosts_variable(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.ssh/config
    raw = {"npu_nodes": {"hosts": ["n1"]}, "_meta": {"hostvars": {"n1": {
        "ansible_host": "192.0.2.1", "ansible_user": "deploy", "ansible_become": True,
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/k -J root@192.0.2.250"}}}}
    host = parse_inventory(raw, Path("inv")).hosts[0]
    assert (host.user, host.become_user, host.known_hosts) == ("deploy", "root", Path("/k"))
    assert host.jumps == (Endpoint("192.0.2.250", "root", 22, None, Path("~/.ssh/known_hosts").expanduser()),)
    raw["_meta"]["hostvars"]["n1"]["dapo_known_hosts"] = "/k"
    with pytest.raises(InventoryError, match="dapo_known_hosts is replaced by `-o UserKnownHostsFile=PATH`"):
        parse_inventory(raw, Path("inv"))


def test_ssh_reads_clustered_flags_and_the_last_config_file():
    options, config = command_line_options("-vJ bastion -Cp2222 -F /first -F /last", "host 'n'")
    assert options == {"proxyjump": "bastion", "port": "2222"} and config == Path("/last")


@pytest.mark.parametrize("line", ['Match exec "touch {ran}"', "  match host x exec 'touch {ran}'",
                                  "Include ~/.ssh/config.d/*"])
def test_a_config_file_that_would_run_a_command_or_hide_settings_is_refused_before_paramiko_reads_it(tmp_path, line):
    from dapo_ops.fleet.ssh_config import load_config

    config, ran = tmp_path / "config", tmp_path / "ran"
    config.write_text(f"Host *\n  User x\n{line.format(ran=ran)}\n")
    with pytest.raises(InventoryError, match="which dapo-ops does not follow"):
        load_config(config)
    assert not ran.exists()


def test_the_first_of_proxyjump_and_proxycommand_wins_and_none_is_any_case():
    assert settings({"ansible_ssh_common_args": "-o ProxyCommand=none"}, "Host *\n  ProxyJump bastion\n").jumps == ()
    assert settings({"ansible_ssh_common_args": "-o ProxyJump=None"}).jumps == ()
    with pytest.raises(InventoryError, match="ProxyCommand is not followed"):
        settings({"ansible_ssh_common_args": "-o ProxyCommand='nc %h %p' -o ProxyJump=bastion"})


def test_an_address_is_a_name_never_a_command_line():
    assert settings({"ansible_ssh_host": "192.0.2.9"}).target.address == "192.0.2.9"
    with pytest.raises(InventoryError, match="is not a host name or IP address"):
        settings({"ansible_host": "10.0.0.2;touch /tmp/x"})
