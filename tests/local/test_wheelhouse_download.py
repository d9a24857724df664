"""`dapo-ops stack wheelhouse` against the real package registry (PyPI): a few small files, one aarch64-only."""
import hashlib

import pytest

from dapo_ops.cli import main
from tests.unit.test_wheelhouse import IDNA, LOCK, PYYAML_AARCH64, PYYAML_AARCH64_SHA, SIX, SIX_SHA, _run_json


@pytest.mark.registry
def test_real_download_of_an_aarch64_subset(tmp_path, capsys):
    """Needs the package registry (PyPI): a few small files, one of them aarch64-only. Runs in CI."""
    lock = tmp_path / "aarch64.txt"
    lock.write_text(LOCK + "requests==2.32.5 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    wheelhouse = tmp_path / "wh"
    argv = ["stack", "wheelhouse", str(wheelhouse), "--platform", "aarch64", "--lock", str(lock),
            "--only", "six", "--only", "idna", "--only", "pyyaml"]
    code, summary, err = _run_json(capsys, argv)
    assert code == 0, err
    assert sorted(summary["downloaded"]) == sorted([IDNA, PYYAML_AARCH64, SIX])
    assert summary["files"] == 3 and summary["bytes"] == sum(p.stat().st_size for p in (wheelhouse / "files").iterdir())
    page = (wheelhouse / "simple/pyyaml/index.html").read_text()
    assert f'href="../../files/{PYYAML_AARCH64}#sha256={PYYAML_AARCH64_SHA}"' in page
    assert hashlib.sha256((wheelhouse / "files" / SIX).read_bytes()).hexdigest() == SIX_SHA

    code, summary, _ = _run_json(capsys, argv)                       # twice: nothing downloaded
    assert code == 0 and summary["downloaded"] == [] and summary["kept"] == 3

    (wheelhouse / "files" / PYYAML_AARCH64).write_bytes(b"corrupted")  # a bad file is replaced and reported
    code, summary, _ = _run_json(capsys, argv)
    assert code == 0 and summary["replaced"] == [PYYAML_AARCH64] and summary["downloaded"] == [PYYAML_AARCH64]
    assert hashlib.sha256((wheelhouse / "files" / PYYAML_AARCH64).read_bytes()).hexdigest() == PYYAML_AARCH64_SHA

    tampered = tmp_path / "tampered.txt"                              # a file whose sha256 is not locked: refused
    tampered.write_text(LOCK.replace(SIX_SHA, "1" * 64))
    other = tmp_path / "wh2"
    assert main(["stack", "wheelhouse", str(other), "--lock", str(tampered), "--only", "six"]) == 1
    err = capsys.readouterr().err
    assert "six==1.17.0" in err and "not one the lock lists" in err
    assert list((other / "files").iterdir()) == [] and not (other / "simple").exists()
