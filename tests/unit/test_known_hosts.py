"""OpenSSH's known_hosts marker lines, which paramiko cannot read (fleet/known_hosts.py)."""

import paramiko
import pytest

from dapo_ops.errors import SSHError
from dapo_ops.fleet.known_hosts import check_not_revoked, load_into, parse_known_hosts

BLOB = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def test_marker_lines_are_split_from_the_plain_ones():
    known = parse_known_hosts(f"@revoked * ssh-ed25519 {BLOB}\n@cert-authority *.lab ssh-ed25519 {BLOB}\n"
                              f"10.0.0.1 ssh-ed25519 {BLOB}\n# a comment\n", "kh")
    assert known.revoked == {BLOB} and known.cert_authorities == 1
    assert known.plain == [f"10.0.0.1 ssh-ed25519 {BLOB}", "# a comment"]


@pytest.mark.parametrize("line, message", [("@revoked *", "kh:1: a @revoked line needs hosts, a key type and a key"),
                                           (f"@trusted * ssh-ed25519 {BLOB}", "kh:1: unknown marker @trusted")])
def test_a_malformed_marker_line_is_named(line, message):
    with pytest.raises(SSHError, match=message):
        parse_known_hosts(line + "\n", "kh")


def test_paramiko_gets_the_plain_entries_and_a_revoked_key_is_refused(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(f"@revoked * ssh-ed25519 {BLOB}\n10.0.0.1 ssh-ed25519 {BLOB}\n")
    client = paramiko.SSHClient()
    known = load_into(client, path)  # paramiko alone raises InvalidHostKey on the @revoked line
    assert list(client.get_host_keys()) == ["10.0.0.1"]
    key = client.get_host_keys()["10.0.0.1"]["ssh-ed25519"]
    with pytest.raises(SSHError, match="node1: its host key is marked @revoked in .*known_hosts — refusing"):
        check_not_revoked(key, known, "node1", path)


def test_an_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(SSHError, match="cannot read known_hosts"):
        load_into(paramiko.SSHClient(), tmp_path / "missing")
    (tmp_path / "garbage").write_text("10.0.0.1 ssh-ed25519 not-base64!!!\n")
    with pytest.raises(SSHError, match="a line paramiko cannot read"):
        load_into(paramiko.SSHClient(), tmp_path / "garbage")
