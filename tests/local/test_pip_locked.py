"""library/dapo_pip_locked.py: installs only what the lock pins, hash-checked; refuses the rest by name."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dapo_sim.wheels import build_wheel
from dapo_ops.stack.lock import parse_lock as product_parse_lock
from filter_plugins.dapo_ops import lock_constraints

ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = ROOT / "library" / "dapo_pip_locked.py"
_spec = importlib.util.spec_from_file_location("dapo_pip_locked", MODULE_PATH)
module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module)


def test_the_modules_lock_reader_agrees_with_the_products_on_the_real_lock():
    text = (ROOT / "stack" / "lock" / "aarch64.txt").read_text()
    ours = module.parse_lock(text)
    product = product_parse_lock(text, "aarch64.txt")
    assert {n: (e["version"], tuple(e["hashes"])) for n, e in ours.items()} == \
        {n: (p.version, p.hashes) for n, p in product.items()}


def test_constraints_carry_the_pins_without_hashes():
    text = "Foo_Bar==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nbaz==2.0 ; python_version >= '3.9' \\\n" \
        "    --hash=sha256:" + "b" * 64 + "\n"
    assert module.constraints_text(module.parse_lock(text)) == "baz==2.0\nfoo-bar==1.0\n"
    assert lock_constraints(text) == "baz==2.0 ; python_version >= \"3.9\"\nfoo-bar==1.0\n"


def _item(name, version, url=None, editable=False):
    info = {"url": url or f"https://files.example/{name}-{version}.whl"}
    if editable:
        info["dir_info"] = {"editable": True}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_plan_check_names_unlocked_and_off_lock_packages_and_passes_the_editable():
    entries = module.parse_lock("a==1.0 --hash=sha256:" + "1" * 64 + "\nb==2.0 --hash=sha256:" + "2" * 64 +
                                "\nnohash==1.0\n")
    report = {"install": [_item("A", "1.0"), _item("b", "2.1"), _item("c", "0.1"), _item("nohash", "1.0"),
                          _item("proj", "0.1", url="file:///src/proj", editable=True), _item("triton", "3.3.1")]}
    planned, refusals, editable, skipped = module.check_plan(report, entries, "/src/proj", skip=["Triton"])
    assert planned == ["a"] and editable == "proj" and skipped == ["triton"]
    assert refusals == ["b 2.1 is planned, the lock pins 2.0", "c 0.1 is not in the lock",
                        "nohash 1.0 has no hash in the lock"]


# ------------------------------------------------------------------ the module, run for real against a local index

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def index_and_venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("piplocked")
    wheels = base / "wheels"
    a = build_wheel(wheels, "alpha", "1.0", {"alpha/__init__.py": ""}, requires=["beta>=1"])
    b = build_wheel(wheels, "beta", "1.2", {"beta/__init__.py": ""})
    build_wheel(wheels, "beta", "9.0", {"beta/__init__.py": ""})  # newer, on the index, not locked
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    conf = base / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {wheels}\ndisable-pip-version-check = true\n")
    lock = base / "lock.txt"
    lock.write_text(f"alpha==1.0 \\\n    --hash=sha256:{_sha(a)}\nbeta==1.2 \\\n    --hash=sha256:{_sha(b)}\n")
    return base, venv / "bin" / "python", conf, lock


def run_module(base: Path, conf: Path, **args) -> dict:
    args_file = base / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": str(conf), "HOME": str(base)}
    result = subprocess.run([sys.executable, str(MODULE_PATH), str(args_file)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.stdout.strip(), result.stderr[-3000:]
    return json.loads(result.stdout)


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                         check=True).stdout
    return {d["name"].lower(): d["version"] for d in json.loads(out)}


def test_a_package_the_lock_lacks_fails_the_install_by_name_and_installs_nothing(index_and_venv):
    base, python, conf, lock = index_and_venv
    partial = base / "partial.txt"
    partial.write_text(lock.read_text().split("beta==")[0])
    result = run_module(base, conf, python=str(python), lock=str(partial), requirements=["alpha"])
    assert result.get("failed") and "beta 9.0 is not in the lock" in result["msg"]
    assert "alpha" not in installed(python) and "beta" not in installed(python)


def test_installs_the_locked_versions_hash_checked_then_changes_nothing(index_and_venv):
    base, python, conf, lock = index_and_venv
    result = run_module(base, conf, python=str(python), lock=str(lock), requirements=["alpha"])
    assert not result.get("failed"), result
    assert result["changed"] and sorted(result["installed"]) == ["alpha==1.0", "beta==1.2"]
    assert {"alpha": "1.0", "beta": "1.2"}.items() <= installed(python).items()  # not the index's newer beta
    again = run_module(base, conf, python=str(python), lock=str(lock), requirements=["alpha"])
    assert again["changed"] is False and again["installed"] == []


def test_a_tampered_file_is_refused_by_its_hash(index_and_venv):
    base, python, conf, lock = index_and_venv
    text = lock.read_text()
    digest_at = text.index("sha256:", text.index("beta==1.2")) + len("sha256:")
    bad = base / "bad.txt"
    bad.write_text(text[:digest_at] + "f" * 64 + text[digest_at + 64:])
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "beta"], check=True)
    result = run_module(base, conf, python=str(python), lock=str(bad), requirements=["beta"])
    assert result.get("failed") and "hash" in result["msg"].lower()
    assert "beta" not in installed(python)


# A PEP 660 backend in the checkout itself (backend-path): the test's venv has no `wheel` for setuptools to build
# an editable wheel with, and there is no index to fetch one from.
EDITABLE_BACKEND = '''
import base64, hashlib, os, zipfile
META = "Metadata-Version: 2.1\\nName: proj\\nVersion: 0.1\\nRequires-Dist: alpha\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
def get_requires_for_build_editable(config_settings=None):
    return []
def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    os.makedirs(os.path.join(metadata_directory, "proj-0.1.dist-info"))
    with open(os.path.join(metadata_directory, "proj-0.1.dist-info", "METADATA"), "w") as f:
        f.write(META)
    return "proj-0.1.dist-info"
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = {"proj.pth": os.path.dirname(os.path.abspath(__file__)) + "\\n",
             "proj-0.1.dist-info/METADATA": META, "proj-0.1.dist-info/WHEEL": WHEEL}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(text.encode())))
    files["proj-0.1.dist-info/RECORD"] = "\\n".join(record + ["proj-0.1.dist-info/RECORD,,"]) + "\\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, "proj-0.1-py3-none-any.whl"), "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return "proj-0.1-py3-none-any.whl"
'''


def test_an_editable_checkout_gets_its_dependencies_from_the_lock(index_and_venv):
    base, python, conf, lock = index_and_venv
    project = base / "proj"
    (project / "proj").mkdir(parents=True)
    (project / "proj" / "__init__.py").write_text("")
    (project / "backend.py").write_text(EDITABLE_BACKEND)
    (project / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                            'backend-path = ["."]\n')
    result = run_module(base, conf, python=str(python), lock=str(lock), editable=str(project))
    assert not result.get("failed"), result
    assert result["editable_installed"] and installed(python).get("proj") == "0.1"
    again = run_module(base, conf, python=str(python), lock=str(lock), editable=str(project))
    assert again["changed"] is False


def test_a_skipped_dependency_is_left_out_and_not_reported_as_a_skipped_task(index_and_venv):
    """Ansible reads a result key `skipped` as "the task was skipped": the module reports `left_out` instead."""
    base, python, conf, lock = index_and_venv
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "alpha", "beta"], check=True)
    result = run_module(base, conf, python=str(python), lock=str(lock), requirements=["alpha"], skip=["Beta"])
    assert not result.get("failed"), result
    assert result["installed"] == ["alpha==1.0"] and result["left_out"] == ["beta"] and "skipped" not in result
    assert "beta" not in installed(python)


# An sdist's in-tree backend that leaves a marker the moment pip loads it (any hook), then builds a plain wheel.
MARKING_BACKEND = '''
import base64, hashlib, os, zipfile
open(@MARKER@, "a").write("built\\n")
NAME, VERSION = @NAME@, "1.0"
META = "Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n" % (NAME, VERSION)
WHEEL = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
INFO = "%s-%s.dist-info" % (NAME, VERSION)
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {NAME + "/__init__.py": "", INFO + "/METADATA": META, INFO + "/WHEEL": WHEEL}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(text.encode())))
    files[INFO + "/RECORD"] = "\\n".join(record + [INFO + "/RECORD,,"]) + "\\n"
    wheel = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel
'''


def _marking_sdist(directory: Path, name: str, marker: Path) -> Path:
    import io
    import tarfile

    top = f"{name}-1.0"
    members = {f"{top}/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n',
               f"{top}/backend.py": MARKING_BACKEND.replace("@MARKER@", repr(str(marker))).replace("@NAME@", repr(name)),
               f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"}
    path = directory / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, text in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def test_an_sdist_on_the_index_never_builds_before_its_hash_is_checked(index_and_venv):
    """#26: the plan ran `pip install --dry-run` without hashes or --only-binary, so an sdist the index served for a
    locked name and version ran its build backend as root on every node before any hash was checked."""
    base, python, conf, lock = index_and_venv
    index = Path(conf.read_text().split("find-links = ")[1].split("\n")[0])
    marker = base / "gamma-built"
    _marking_sdist(index, "gamma", marker)
    tampered = base / "gamma-lock.txt"  # the lock pins gamma 1.0 by the hash of a file the index does not serve
    tampered.write_text(lock.read_text() + "gamma==1.0 \\\n    --hash=sha256:" + "c" * 64 + "\n")
    as_wheel = run_module(base, conf, python=str(python), lock=str(tampered), requirements=["gamma"])
    assert as_wheel.get("failed") and "gamma" in as_wheel["msg"]
    as_source = run_module(base, conf, python=str(python), lock=str(tampered), requirements=["gamma"],
                           source_only=["gamma"])
    assert as_source.get("failed") and "hash" in as_source["msg"].lower()
    assert not marker.exists() and "gamma" not in installed(python)


def test_a_source_only_package_is_built_from_its_hash_checked_download(index_and_venv):
    base, python, conf, lock = index_and_venv
    index = Path(conf.read_text().split("find-links = ")[1].split("\n")[0])
    marker = base / "delta-built"
    sdist = _marking_sdist(index, "delta", marker)
    locked = base / "delta-lock.txt"
    locked.write_text(lock.read_text() + f"delta==1.0 \\\n    --hash=sha256:{_sha(sdist)}\n")
    refused = run_module(base, conf, python=str(python), lock=str(locked), requirements=["delta"])
    assert refused.get("failed") and not marker.exists()      # not listed as source-only: wheels only
    result = run_module(base, conf, python=str(python), lock=str(locked), requirements=["delta"],
                        source_only=["delta"])
    assert not result.get("failed"), result
    assert result["installed"] == ["delta==1.0"] and installed(python).get("delta") == "1.0" and marker.exists()
    again = run_module(base, conf, python=str(python), lock=str(locked), requirements=["delta"],
                       source_only=["delta"])
    assert again["changed"] is False and again["installed"] == []  # not reinstalled from a new download each run


def test_the_manifests_source_only_packages_are_locked_ones():
    import yaml

    manifest = yaml.safe_load((ROOT / "stack" / "manifest.yml").read_text())
    entries = module.parse_lock((ROOT / "stack" / "lock" / "aarch64.txt").read_text())
    names = manifest["python"]["source_only"]
    assert names and all(module.normalize(name) in entries for name in names)
    assert module.source_only_lines(entries, names + ["not-locked"]) == [entries[module.normalize(n)]["line"]
                                                                        for n in sorted(names)]
