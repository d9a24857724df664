"""The node-to-node SSH of one `dapo-ops stage` run (dapo_ops/stage/keys.py): the run's key loads as OpenSSH's
format, its authorized_keys line is restricted to the forced command and reads back as that command the way sshd
reads it, and the shell commands that put the line in place and take it away are run for real with bash on a
temporary HOME."""

import io
import os
import shutil
import stat
import subprocess

import paramiko
import pytest

from dapo_ops.fleet.ssh_config import as_become_user
from dapo_ops.stage import keys

RELAY = "python3 '/tmp/dapo-stage.Ab3dEf9h/relay.py' recv '/tmp/dapo-stage.Ab3dEf9h/hop.json'"
OTHERS = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorKeyOne operator@laptop\n"
          'from="10.0.0.0/8" ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQOperatorTwo backup@bastion\n')


def sshd_command(line: str) -> str:
    """The forced command sshd takes from an authorized_keys line: OpenSSH's opt_dequote (misc.c), which turns `\\"`
    into `"` and copies every other character, a backslash included, as it is."""
    start = line.index('command="') + len('command="')
    out, i = [], start
    while line[i] != '"':
        if line[i] == "\\" and line[i + 1] == '"':
            i += 1
        out.append(line[i])
        i += 1
    return "".join(out)


def run_bash(command: str, home) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], env={**os.environ, "HOME": str(home)}, capture_output=True,
                          text=True, timeout=30)


def authorized_keys(home, text: str = OTHERS, mode: int = 0o600):
    path = home / ".ssh" / "authorized_keys"
    path.parent.mkdir(mode=0o700)
    path.write_text(text)
    path.chmod(mode)
    return path


# ------------------------------------------------------------------------------------------------ the key

def test_new_key_is_an_openssh_ed25519_key_paramiko_loads_whose_public_half_matches():
    key = keys.new_key("3f9a1c")
    assert key.private_openssh.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    loaded = paramiko.Ed25519Key.from_private_key(io.StringIO(key.private_openssh.decode()))
    kind, blob = key.public.split()
    assert kind == "ssh-ed25519" == loaded.get_name() and loaded.get_base64() == blob
    assert key.comment == "dapo-ops-stage-3f9a1c"
    assert keys.new_key("3f9a1c").public != key.public        # a fresh key every run


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen here")
def test_ssh_keygen_derives_the_same_public_key_from_the_private_half(tmp_path):
    key = keys.new_key("run1")
    private = tmp_path / "key"
    private.write_bytes(key.private_openssh)
    private.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == key.public.split()


# ------------------------------------------------------------------------------------------------ the line

def test_the_authorized_line_is_restricted_to_the_forced_command_and_ends_with_the_run_s_comment():
    key = keys.new_key("run1")
    line = keys.authorized_line(key, RELAY)
    assert line.startswith('restrict,command="')
    assert line.endswith(f'" {key.public} dapo-ops-stage-run1') and "\n" not in line
    assert sshd_command(line) == RELAY


def test_double_quotes_in_the_forced_command_are_escaped_and_read_back_by_sshd():
    # with become, the relay's command is wrapped in sudo ... bash -c '...', whose quoting of the relay's own single
    # quotes puts double quotes into the forced command
    forced = as_become_user(RELAY, "verl")
    assert '"' in forced
    line = keys.authorized_line(keys.new_key("run1"), forced)
    options = line[: line.index(" ssh-ed25519 ")]
    assert options.count('"') - options.count('\\"') == 2        # only the two that delimit the command
    assert sshd_command(line) == forced


def test_a_backslash_in_the_forced_command_reaches_sshd_unchanged():
    # sshd's opt_dequote unescapes only \" ; a doubled backslash stays doubled, so the relay would be run with
    # another command than the one asked
    forced = r"python3 /tmp/dapo-stage.x/relay.py recv '/data/a\b.json'"
    line = keys.authorized_line(keys.new_key("run1"), forced)
    assert sshd_command(line) == forced, (
        f"backslashes are doubled, but sshd reads {sshd_command(line)!r}")


# ------------------------------------------------------------------------------------------------ in and out

def test_authorize_appends_the_line_once_and_unauthorize_puts_the_file_back_in_place(tmp_path):
    path = authorized_keys(tmp_path)
    inode = path.stat().st_ino
    key = keys.new_key("a1b2")
    line = keys.authorized_line(key, RELAY)
    assert run_bash(keys.authorize_command(line), tmp_path).returncode == 0
    assert path.read_text().splitlines() == [*OTHERS.splitlines(), line]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    done = run_bash(keys.unauthorize_command(key), tmp_path)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == OTHERS
    assert path.stat().st_ino == inode and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["authorized_keys"]     # no scratch file left


def test_unauthorize_takes_away_only_its_own_run_s_lines(tmp_path):
    path = authorized_keys(tmp_path)
    first, second = keys.new_key("a1b2"), keys.new_key("a1b2c3")     # one token a prefix of the other
    for key in (first, second, first):
        assert run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), tmp_path).returncode == 0
    assert run_bash(keys.unauthorize_command(first), tmp_path).returncode == 0
    assert path.read_text() == OTHERS + keys.authorized_line(second, RELAY) + "\n"
    assert run_bash(keys.unauthorize_command(second), tmp_path).returncode == 0
    assert path.read_text() == OTHERS


def test_authorize_makes_a_private_ssh_directory_and_file_when_there_is_none(tmp_path):
    assert run_bash(keys.authorize_command(keys.authorized_line(keys.new_key("t"), RELAY)), tmp_path).returncode == 0
    assert stat.S_IMODE((tmp_path / ".ssh").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / ".ssh" / "authorized_keys").stat().st_mode) == 0o600


def test_unauthorize_without_an_authorized_keys_file_succeeds_and_creates_nothing(tmp_path):
    done = run_bash(keys.unauthorize_command(keys.new_key("t")), tmp_path)
    assert done.returncode == 0 and list(tmp_path.iterdir()) == []
    (tmp_path / ".ssh").mkdir()
    assert run_bash(keys.unauthorize_command(keys.new_key("t")), tmp_path).returncode == 0
    assert list((tmp_path / ".ssh").iterdir()) == []


def test_unauthorize_writes_through_a_linked_authorized_keys_and_keeps_the_link(tmp_path):
    real = tmp_path / "keys-real"
    real.write_text(OTHERS)
    (tmp_path / ".ssh").mkdir(mode=0o700)
    (tmp_path / ".ssh" / "authorized_keys").symlink_to(real)
    key = keys.new_key("t")
    run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), tmp_path)
    assert run_bash(keys.unauthorize_command(key), tmp_path).returncode == 0
    assert (tmp_path / ".ssh" / "authorized_keys").is_symlink() and real.read_text() == OTHERS


def test_an_authorized_keys_without_a_final_newline_keeps_its_last_key(tmp_path):
    # many editors and `echo -n`/ssh-copy-id variants leave the last line unterminated: the run's line must not be
    # glued onto it, or removing the run's line removes the user's key with it
    path = authorized_keys(tmp_path, OTHERS.rstrip("\n"))
    key = keys.new_key("a1b2")
    line = keys.authorized_line(key, RELAY)
    run_bash(keys.authorize_command(line), tmp_path)
    glued = any(other != line and other.endswith(line) for other in path.read_text().splitlines())
    assert not glued, (
        "the run's line was appended to the user's last key on the same line")
    run_bash(keys.unauthorize_command(key), tmp_path)
    assert path.read_text().splitlines() == OTHERS.splitlines(), (
        "removing the run's line took the user's last key with it")


# ------------------------------------------------------------------------------------------------ the hop

def test_hop_argv_uses_the_run_s_key_and_known_hosts_only_and_forwards_nothing():
    argv = keys.hop_argv("/tmp/dapo-stage.Ab3dEf9h", "verl", "10.0.0.12", 2222)
    assert argv[0] == "ssh" and argv[-2:] == ["10.0.0.12", keys.RELAY_COMMAND]
    assert "-T" in argv
    options = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    for wanted in ("BatchMode=yes", "StrictHostKeyChecking=yes", "IdentitiesOnly=yes", "IdentityAgent=none",
                   "UserKnownHostsFile=/tmp/dapo-stage.Ab3dEf9h/known_hosts", "GlobalKnownHostsFile=/dev/null",
                   "ForwardAgent=no", "ClearAllForwardings=yes"):
        assert wanted in options
    assert argv[argv.index("-i") + 1] == "/tmp/dapo-stage.Ab3dEf9h/key"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "verl"
    assert "-A" not in argv and not any(o.lower() == "forwardagent=yes" for o in options)
    assert not any(a.startswith(("-L", "-R", "-D", "-X", "-Y")) for a in argv)


def test_known_hosts_names_a_non_standard_port_in_brackets():
    assert keys.known_hosts_name("10.0.0.12", 22) == "10.0.0.12"
    assert keys.known_hosts_name("10.0.0.12", 2222) == "[10.0.0.12]:2222"


def test_an_authorized_keys_the_run_made_goes_with_its_line(tmp_path):
    key = keys.new_key("fresh")
    assert run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), tmp_path).returncode == 0
    assert (tmp_path / ".ssh" / "authorized_keys").read_text().endswith(f" {key.comment}\n")
    assert run_bash(keys.unauthorize_command(key), tmp_path).returncode == 0
    assert not (tmp_path / ".ssh").exists()


def test_a_ssh_directory_the_run_made_goes_too_but_not_one_that_was_there(tmp_path):
    key = keys.new_key("fresh")
    home = tmp_path / "home"
    home.mkdir()
    assert run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), home).returncode == 0
    assert run_bash(keys.unauthorize_command(key), home).returncode == 0
    assert not (home / ".ssh").exists()
    (home / ".ssh").mkdir(mode=0o700)
    assert run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), home).returncode == 0
    assert run_bash(keys.unauthorize_command(key), home).returncode == 0
    assert (home / ".ssh").is_dir() and list((home / ".ssh").iterdir()) == []


def test_runs_ending_at_once_never_damage_the_users_keys(tmp_path):
    """Two runs' removals (and another's addition) on one node at the same moment, many times: the user's own
    lines are always there whole (the rewrite is locked and each run has its own scratch copy)."""
    from concurrent.futures import ThreadPoolExecutor

    others = "".join(f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperator{n:03d} user{n}@host\n" for n in range(50))
    path = authorized_keys(tmp_path, others)
    for round_ in range(10):
        a, b, c = (keys.new_key(f"r{round_}{x}") for x in "abc")
        for key in (a, b):
            assert run_bash(keys.authorize_command(keys.authorized_line(key, RELAY)), tmp_path).returncode == 0
        with ThreadPoolExecutor(3) as pool:
            done = list(pool.map(lambda cmd: run_bash(cmd, tmp_path), [
                keys.unauthorize_command(a), keys.unauthorize_command(b),
                keys.authorize_command(keys.authorized_line(c, RELAY))]))
        assert all(d.returncode == 0 for d in done), [d.stderr for d in done]
        assert run_bash(keys.unauthorize_command(c), tmp_path).returncode == 0
        assert path.read_text() == others, f"round {round_}"
