"""Issue 26 (7): neither Fabric nor Ansible forwards the operator's SSH agent to a node, even where the operator's
~/.ssh/config asks for it (root job code on a node could use the agent to reach every other host it opens)."""

import configparser
import os
import subprocess
import sys
from pathlib import Path

from dapo_ops.paths import PROJECT_ROOT

PROBE = """
import sys
from pathlib import Path
from fabric import Connection
from dapo_ops.fleet.ssh import HostSpec, connection
host = HostSpec("node1", "192.0.2.11", Path("/dev/null"))
print(Connection("192.0.2.11").forward_agent, connection(host.endpoint, 10).forward_agent)
"""


def test_fabric_forwards_no_agent_whatever_ssh_config_says(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n  ForwardAgent yes\n")
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, HOME=str(home)), cwd=PROJECT_ROOT)
    assert probe.returncode == 0, probe.stderr
    plain, ours = probe.stdout.split()
    assert plain == "True"            # the config is read: a Connection left to it would forward the agent
    assert ours == "False"


def test_ansible_asks_ssh_to_forward_no_agent_and_to_check_host_keys():
    config = configparser.ConfigParser(interpolation=None)
    config.read(Path(PROJECT_ROOT, "ansible.cfg"))
    ssh_args = config["ssh_connection"]["ssh_args"]
    assert "-o ForwardAgent=no" in ssh_args
    assert "-o StrictHostKeyChecking=yes" in ssh_args    # whatever an inventory's ansible_ssh_common_args say


def test_every_connection_has_a_config_of_its_own():
    """A write to a Connection's config re-merges it (invoke empties it first): with one config shared by the
    threads of a fan-out, another thread saw it empty (CI: "No attribute or config key found for
    'connect_kwargs'")."""
    from dapo_ops.fleet.ssh import HostSpec, connection

    endpoint = HostSpec("node1", "192.0.2.11", Path("/dev/null")).endpoint
    first, second = connection(endpoint, 10), connection(endpoint, 10)
    assert first.config is not second.config and second.config.load_ssh_configs is False
    first.config.written_by_one = 1
    assert "connect_kwargs" in second.config and "written_by_one" not in second.config
