"""The python_env layer's simulated packages behave like the real ones: the Miniconda installer and `conda create`
with and without channel access (conda 24.7.1, conda/constructor header.sh), the torchvision / triton-ascend /
triton stand-ins (their real wheels' metadata), the real wheels the mirror serves for CANN's Python dependencies
(vllm-ascend installation.md), and the filter the role uses to pick what to install."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from dapo_ops.manifest import load_manifest
from dapo_ops.stack import wheelhouse
from dapo_sim import artifacts, conda_channel, wheels
from filter_plugins.dapo_ops import unsatisfied

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.fixture(scope="module")
def installer(manifest, tmp_path_factory):
    path = tmp_path_factory.mktemp("artifacts") / manifest.artifact("conda_installer").file
    path.write_bytes(artifacts.build(artifacts.pinned_packages(manifest)["conda_installer"]))
    return path


def install(installer, prefix, *flags):
    return subprocess.run(["bash", str(installer), "-b", *flags, "-p", str(prefix)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def conda_kept(installer, tmp_path_factory):
    """A Miniconda stand-in installed with -k: its package cache stays."""
    prefix = tmp_path_factory.mktemp("kept") / "miniconda3"
    result = install(installer, prefix, "-k")
    assert result.returncode == 0, result.stdout + result.stderr
    return prefix


@pytest.fixture(scope="module")
def conda_cleared(installer, tmp_path_factory):
    """A Miniconda stand-in installed without -k: the installer clears its package cache (constructor's default)."""
    prefix = tmp_path_factory.mktemp("cleared") / "miniconda3"
    result = install(installer, prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    return prefix


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def conda(prefix, *args, env=None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CONDA_")}
    # `defaults` pointing at a port nobody listens on: the channel is unreachable, as on an air-gapped node
    full_env["CONDA_DEFAULT_CHANNELS"] = f"http://127.0.0.1:{closed_port()}/pkgs/main"
    full_env.update(env or {})
    return subprocess.run([str(prefix / "bin" / "conda"), *args], capture_output=True, text=True, timeout=120,
                          env=full_env)


@pytest.fixture(scope="module")
def channel_server(manifest, tmp_path_factory):
    """The mirror's conda channel (conda_channel.write_channel), served over HTTP."""
    root = tmp_path_factory.mktemp("mirror")
    conda_channel.write_channel(root / "conda", manifest)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/conda"
    server.shutdown()


def test_installer_leaves_its_package_cache_only_with_k(installer, conda_kept, conda_cleared):
    records = sorted(p.parent.parent.name for p in (conda_kept / "pkgs").glob("*/info/index.json"))
    assert [r.split("-")[0] for r in records] == ["pip", "python"]
    assert (conda_cleared / "bin" / "conda").exists() and not (conda_cleared / "pkgs").exists()
    assert "-k" in subprocess.run(["bash", str(installer), "-h"], capture_output=True, text=True).stdout


def test_create_without_channel_access_fails_like_conda(conda_kept, manifest):
    result = conda(conda_kept, "create", "-n", "nonet", f"python={manifest.python_version}", "-y")
    assert result.returncode == 1
    assert "CondaHTTPError: HTTP 000 CONNECTION FAILED for url <http://127.0.0.1:" in result.stderr
    assert "/pkgs/main/linux-aarch64/repodata.json>" in result.stderr
    assert not (conda_kept / "envs" / "nonet").exists()


def test_create_offline_uses_the_package_cache(conda_kept, manifest):
    result = conda(conda_kept, "create", "-n", "off", f"python={manifest.python_version}", "-y", "--offline")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (conda_kept / "envs" / "off" / "bin" / "python").exists()
    # CONDA_OFFLINE=true is the same setting (conda reads every setting from CONDA_<NAME>)
    again = conda(conda_kept, "create", "-n", "off", "python=3.7", "-y", env={"CONDA_OFFLINE": "true"})
    assert again.returncode == 1 and "PackagesNotFoundError" in again.stderr and "  - python=3.7" in again.stderr


def test_create_offline_without_a_package_cache_finds_no_python(conda_cleared, manifest):
    result = conda(conda_cleared, "create", "-n", "off", f"python={manifest.python_version}", "-y", "--offline")
    assert result.returncode == 1
    assert "PackagesNotFoundError: The following packages are not available from current channels" in result.stderr


def test_create_from_a_channel_mirror(conda_kept, channel_server, manifest):
    result = conda(conda_kept, "create", "-n", "mirrored", f"python={manifest.python_version}", "-y",
                   "--override-channels", "-c", channel_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (conda_kept / "envs" / "mirrored" / "bin" / "python").exists()
    # without --override-channels the unreachable defaults are still searched, and fail the command
    both = conda(conda_kept, "create", "-n", "both", f"python={manifest.python_version}", "-y", "-c", channel_server)
    assert both.returncode == 1 and "CondaHTTPError" in both.stderr
    old = conda(conda_kept, "create", "-n", "old", "python=3.7", "-y", "--override-channels", "-c", channel_server)
    assert old.returncode == 1 and "PackagesNotFoundError" in old.stderr and f"{channel_server}/noarch" in old.stderr


def test_override_channels_needs_a_channel(conda_kept):
    result = conda(conda_kept, "create", "-n", "x", "python=3.11", "-y", "--override-channels")
    assert result.returncode == 1
    assert "At least one -c / --channel flag must be supplied when using --override-channels." in result.stderr


def test_create_rejects_flags_conda_does_not_have(conda_kept):
    result = conda(conda_kept, "create", "-n", "x", "python=3.11", "--no-such-flag")
    assert result.returncode == 2 and "unrecognized arguments: --no-such-flag" in result.stderr


def _pin_module():
    spec = importlib.util.spec_from_file_location("dapo_conda_python", ROOT / "library" / "dapo_conda_python.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pinned_python_is_taken_offline_and_from_a_faithful_mirror(conda_kept, channel_server):
    """The role's spec (the installer's python==version=build) solves both ways, and either environment records the
    installer's package digests (library/dapo_conda_python.py passes it)."""
    pin = _pin_module()
    pinned = pin.pin_of(pin.python_record(str(conda_kept)), str(conda_kept))
    spec = f"python=={pinned['version']}={pinned['build']}"
    for name, where in (("pin-off", ["--offline"]), ("pin-mirror", ["--override-channels", "-c", channel_server])):
        result = conda(conda_kept, "create", "-n", name, spec, "-y", *where)
        assert result.returncode == 0, result.stdout + result.stderr
        env = str(conda_kept / "envs" / name)
        assert pin.mismatch(pinned, pin.python_record(env), env) is None
        assert pin.python_record(env)["channel"].startswith(channel_server if name == "pin-mirror" else "https://")
    wrong = conda(conda_kept, "create", "-n", "x", f"python=={pinned['version']}=other_0", "-y", "--offline")
    assert wrong.returncode == 1 and "PackagesNotFoundError" in wrong.stderr


def test_a_mirror_serving_another_file_under_the_pinned_name_is_caught(conda_kept, manifest, tmp_path):
    """A channel whose python record has the installer's name but another digest: conda takes it (the stand-in, like
    conda, trusts the channel's repodata), and the role's check refuses the environment."""
    pin = _pin_module()
    pinned = pin.pin_of(pin.python_record(str(conda_kept)), str(conda_kept))
    channel = conda_channel.write_channel(tmp_path / "conda", manifest, python_version=pinned["version"])
    repodata = next(channel.glob("linux-*/repodata.json"))
    data = json.loads(repodata.read_text())
    for record in data["packages.conda"].values():
        record["sha256"] = "0" * 64
    repodata.write_text(json.dumps(data))
    result = conda(conda_kept, "create", "-n", "tampered", f"python=={pinned['version']}={pinned['build']}", "-y",
                   "--override-channels", "-c", channel.as_uri())
    assert result.returncode == 0, result.stdout + result.stderr
    env = str(conda_kept / "envs" / "tampered")
    assert "served another file under that name" in pin.mismatch(pinned, pin.python_record(env), env)


def _wheel(path: Path) -> tuple[dict[str, list[str]], set[str]]:
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    fields: dict[str, list[str]] = {}
    for line in meta.splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value)
    return fields, names


def test_triton_ascend_standin_is_the_triton_package(manifest, tmp_path):
    from packaging.version import Version

    ascend, cuda = wheels.triton_wheels(tmp_path, manifest)
    meta, files = _wheel(ascend)
    pinned = manifest.pinned_version("triton_ascend")
    assert meta["Name"] == ["triton-ascend"] and meta["Version"] == [pinned] and "Requires-Dist" not in meta
    assert {"triton/__init__.py", "triton/backends/ascend/__init__.py"} <= files
    with zipfile.ZipFile(ascend) as zf:
        assert f'__version__ = "{Version(pinned).base_version}"' in zf.read("triton/__init__.py").decode()
    cuda_meta, cuda_files = _wheel(cuda)
    assert cuda_meta["Name"] == ["triton"] and "triton/backends/nvidia/__init__.py" in cuda_files
    assert "triton/__init__.py" in cuda_files  # the file both distributions own


def test_torchvision_standin_requires_the_pinned_torch(manifest, tmp_path):
    wheel = next(w for w in wheels.standin_wheels(tmp_path, manifest) if w.name.startswith("torchvision-"))
    meta, _ = _wheel(wheel)
    assert meta["Version"] == [manifest.pinned_version("torchvision")]
    assert f"torch=={manifest.pinned_version('torch')}" in meta["Requires-Dist"]
    assert {"numpy", "pillow!=8.3.*,>=5.3.0"} <= set(meta["Requires-Dist"])


def test_sim_lock_keeps_every_locked_line_and_swaps_only_the_standins_hashes(manifest, tmp_path):
    from dapo_ops.stack.lock import parse_lock

    lock_path, _ = wheels.source_lock(manifest)
    real = parse_lock(lock_path.read_text(), "real")
    standins = wheels.standin_wheels(tmp_path, manifest)
    sim = parse_lock(wheels.render_sim_lock(lock_path.read_text(), lock_path.name, standins), "sim")
    assert {n: p.version for n, p in sim.items()} == {n: p.version for n, p in real.items()}
    assert set(wheels.STANDIN_PACKAGES) <= set(sim)  # else the stand-in branch below checks nothing
    for name, package in sim.items():
        if name in wheels.STANDIN_PACKAGES:
            wheel = next(w for w in standins if w.name.startswith(name.replace("-", "_") + "-" + package.version))
            assert package.hashes == (wheelhouse.sha256_of(wheel),)
        else:
            assert package.hashes == real[name].hashes, name


def test_sim_lock_refuses_a_lock_pinning_a_version_with_no_standin(manifest, tmp_path):
    from dapo_sim.errors import SimError

    text = "torch==0.0.1 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    with pytest.raises(SimError, match="no stand-in wheel for torch==0.0.1"):
        wheels.render_sim_lock(text, "lock", wheels.standin_wheels(tmp_path, manifest))


def test_torch_standin_requires_what_the_real_wheel_requires(manifest, tmp_path):
    """The lock's `# via torch` annotations (uv read the real wheel's METADATA) name the same distributions."""
    import re

    wheel = next(w for w in wheels.standin_wheels(tmp_path, manifest) if w.name.startswith("torch-"))
    meta, _ = _wheel(wheel)
    declared = {re.split(r"[<>=!~]", r, maxsplit=1)[0] for r in meta["Requires-Dist"]}
    lock_path, _ = wheels.source_lock(manifest)
    via_torch, current = set(), None
    for line in lock_path.read_text().splitlines():
        if re.match(r"^[a-z0-9]", line):
            current = line.split("==")[0]
        elif re.fullmatch(r"\s*#\s+(via\s+)?torch", line):
            via_torch.add(current)
    assert declared == via_torch


def test_standin_repositories_carry_the_recorded_upstream_requirements(manifest, tmp_path):
    from dapo_sim import repos

    verl_wheel = tmp_path / "verl.whl"
    with zipfile.ZipFile(verl_wheel, "w") as zf:
        zf.writestr("verl/trainer/config/ppo_trainer.yaml", "a: 1\n")
    files = repos.repo_files(manifest, verl_wheel)
    vllm = files[manifest.source("vllm").repo][1]
    vllm_ascend = files[manifest.source("vllm_ascend").repo][1]
    verl = files[manifest.source("verl").repo][1]
    assert vllm["requirements/common.txt"] == repos.recorded_layer(manifest, "vllm", "requirements/common.txt")
    assert "transformers >= 4.55.2" in vllm["requirements/common.txt"]
    assert vllm_ascend["requirements.txt"] == repos.recorded_layer(manifest, "vllm_ascend", "requirements.txt")
    assert f"torch-npu=={manifest.pinned_version('torch_npu')}" in vllm_ascend["requirements.txt"].split()
    requirements = manifest.source("verl").extra["requirements"]
    assert verl[requirements] == repos.recorded_layer(manifest, "verl", requirements)
    assert "'accelerate'" in verl["setup.py"] and not verl[requirements].startswith("# Recorded")


def test_unsatisfied_lists_what_to_install_in_order():
    have = {"attrs": {"version": "25.4.0"}, "scipy": {"version": "1.14.0"}, "numpy": {"version": "2.1.0"},
            "triton-ascend": {"version": "3.2.0rc4"}, "sympy": None}
    specs = {"numpy": "<2", "attrs": "==25.4.0", "sympy": "==1.14.0", "scipy": "==1.15.3",
             "triton-ascend": "==3.2.0rc4"}
    assert unsatisfied(have, specs) == ["numpy<2", "sympy==1.14.0", "scipy==1.15.3"]
    assert unsatisfied(have, {}) == [] and unsatisfied(None, {"a": "==1"}) == ["a==1"]
