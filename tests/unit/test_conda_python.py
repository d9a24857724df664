"""library/dapo_conda_python.py: the environment's Python must be the pinned installer's (build and digest)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dapo_conda_python", ROOT / "library" / "dapo_conda_python.py")
module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module)

PINNED = {"name": "python", "version": "3.11.9", "build": "h955ad1f_0", "sha256": "a" * 64, "md5": "b" * 32,
          "channel": "https://repo.anaconda.com/pkgs/main/linux-aarch64"}


def prefix_with(tmp_path, name, *records):
    prefix = tmp_path / name
    (prefix / "conda-meta").mkdir(parents=True)
    for record in records:
        dist = f"{record['name']}-{record['version']}-{record['build']}"
        (prefix / "conda-meta" / f"{dist}.json").write_text(json.dumps(record))
    return str(prefix)


def test_the_pin_is_the_installers_python_record(tmp_path):
    base = prefix_with(tmp_path, "conda", PINNED, {"name": "pip", "version": "24.0", "build": "py311_0"})
    pinned = module.pin_of(module.python_record(base), base)
    assert pinned["dist"] == "python-3.11.9-h955ad1f_0"
    assert (pinned["sha256"], pinned["md5"]) == ("a" * 64, "b" * 32)


def test_an_installation_without_a_python_record_or_digest_is_refused(tmp_path):
    empty = prefix_with(tmp_path, "empty")
    with pytest.raises(module.PinError, match="has no python record"):
        module.pin_of(module.python_record(empty), empty)
    bare = prefix_with(tmp_path, "bare", {k: v for k, v in PINNED.items() if k not in ("sha256", "md5")})
    with pytest.raises(module.PinError, match="records no package digest"):
        module.pin_of(module.python_record(bare), bare)
    broken = prefix_with(tmp_path, "broken")
    Path(broken, "conda-meta", "python-3.11.9-x.json").write_text("{")
    with pytest.raises(module.PinError, match="unreadable conda record"):
        module.python_record(broken)


def test_the_same_python_passes(tmp_path):
    pinned = module.pin_of(PINNED, "conda")
    env = prefix_with(tmp_path, "env", dict(PINNED, channel="http://mirror/pkgs/main/linux-aarch64"))
    assert module.mismatch(pinned, module.python_record(env), env) is None


@pytest.mark.parametrize("change, message", [
    ({"version": "3.11.14", "build": "h1_0"}, "has python-3.11.14-h1_0 from http://mirror, not the installer's "
                                               "python-3.11.9-h955ad1f_0"),
    ({"sha256": "c" * 64}, "has sha256 " + "c" * 64 + ", the installer's has " + "a" * 64),
    ({"md5": "d" * 32}, "has md5 " + "d" * 32),
    ({"sha256": None}, "has sha256 none recorded"),
])
def test_another_python_or_another_file_is_refused(tmp_path, change, message):
    pinned = module.pin_of(PINNED, "conda")
    record = {k: v for k, v in dict(PINNED, channel="http://mirror", **change).items() if v is not None}
    env = prefix_with(tmp_path, "env", record)
    assert message in module.mismatch(pinned, module.python_record(env), env)


def test_an_environment_not_made_by_conda_is_refused(tmp_path):
    env = prefix_with(tmp_path, "venv")
    assert "has no python record" in module.mismatch(module.pin_of(PINNED, "conda"), module.python_record(env), env)


def test_the_installers_python_must_be_a_release_of_the_manifests():
    pinned = module.pin_of(PINNED, "conda")
    module.check_release(pinned, "3.11")
    module.check_release(pinned, None)
    with pytest.raises(module.PinError, match="carries Python 3.11.9, the stack manifest pins 3.12"):
        module.check_release(pinned, "3.12")
    with pytest.raises(module.PinError):
        module.check_release(pinned, "3.1")
