"""Controller files get their modes whatever the umask (dapo_ops/files.py, used by records, render, bundles)."""

import os
import stat

import pytest

from dapo_ops.files import make_dirs, write_text


@pytest.mark.parametrize("umask", [0o077, 0o000, 0o022])
def test_modes_do_not_follow_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_text(tmp_path / "a" / "b" / "f.txt", "x\n")
        write_text(tmp_path / "secret", "s\n", mode=0o600)
        make_dirs(tmp_path / "c" / "d")
    finally:
        os.umask(previous)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == mode(tmp_path / "c" / "d") == 0o755
    assert mode(tmp_path / "a" / "b" / "f.txt") == 0o644 and mode(tmp_path / "secret") == 0o600


def test_existing_directories_keep_their_mode(tmp_path):
    (tmp_path / "private").mkdir(mode=0o700)
    os.chmod(tmp_path / "private", 0o700)
    write_text(tmp_path / "private" / "f", "x")
    assert stat.S_IMODE(os.stat(tmp_path / "private").st_mode) == 0o700
