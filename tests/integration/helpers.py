from dapo_ops.fleet.ssh import run_on
from dapo_ops.inventory import load_inventory


def hosts():
    return {h.name: h for h in load_inventory().hosts}


def sh(host, command, timeout=60, ok=True):
    result = run_on(host, command, timeout=timeout)
    assert result.error is None, result.error
    if ok:
        assert result.exit_code == 0, f"{command!r} on {host.name}: {result.stdout}{result.stderr}"
    return result


def sigint_as_at_a_terminal():
    """Popen preexec_fn: the child takes SIGINT as a process started from a terminal does. A test runner started
    as a background job (`cmd &` in a script) ignores SIGINT, and an ignored signal stays ignored across exec, so
    without this a Ctrl-C test would test nothing but that inheritance."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def standin_stack_env(nodes, numpy="1.26.4"):
    """What the python, vllm, verl and cann roles leave on a `sim up --provisioned` node, in seconds instead of a
    site.yml run: the env (a venv at the layout's prefix holding the stand-in wheels, unpacked as pip would) and the
    CANN environment script (the ascend_cann role's template). For the audit's tests, whose subject is the audit."""
    import io
    import os
    import tempfile
    from pathlib import Path

    import jinja2

    from dapo_ops.fleet.ssh import connect
    from dapo_ops.layout import node_layout
    from dapo_ops.manifest import load_manifest
    from dapo_ops.paths import PROJECT_ROOT
    from dapo_sim import wheels
    from dapo_ops.stack import platform_tags, wheelhouse
    from dapo_ops.stackcheck import source_declared_version, vllm_built_version

    manifest = load_manifest()
    with tempfile.TemporaryDirectory() as tmp:
        built = [w for w in wheels.standin_wheels(Path(tmp), manifest)
                 if w.name.split("-")[0] in ("torch", "torch_npu", "vllm_ascend")]
        built.append(wheels.build_wheel(Path(tmp), "vllm", vllm_built_version(manifest), {"vllm/__init__.py": ""}))
        built.append(wheels.build_wheel(Path(tmp), "verl", source_declared_version(manifest, "verl"),
                                        {"verl/__init__.py": ""}))
        built.append(wheels.build_wheel(Path(tmp), "numpy", numpy, {"numpy/__init__.py": f'__version__ = "{numpy}"\n'}))
        have = {w.name.split("-")[0].replace("_", "-").lower() for w in built}
        metadata = Path(tmp) / "metadata"  # the rest of the lock's closure, as pip leaves it: its dist-info alone
        for package in platform_tags.select(wheelhouse.read_lock(wheels.source_lock(manifest)[0]),
                                            os.uname().machine, manifest.python_version):
            if package.name not in have:
                info = metadata / f"{package.name.replace('-', '_')}-{package.version}.dist-info"
                info.mkdir(parents=True)
                (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.name}\n"
                                               f"Version: {package.version}\n")
        built.append(Path(__import__("shutil").make_archive(str(Path(tmp) / "closure"), "zip", metadata)))
        template = (PROJECT_ROOT / "roles" / "ascend_cann" / "templates" / "dapo-ops-env.sh.j2").read_text()
        for host in nodes.values():
            layout = node_layout(host.vars)
            env = jinja2.Environment(undefined=jinja2.StrictUndefined)
            env.filters["quote"] = __import__("shlex").quote
            script = env.from_string(template).render(ascend_cann_install_path=manifest.platform["install_path"],
                                                      ascend_cann_cxx_abi=1)
            prefix = layout.python.rsplit("/bin/", 1)[0]
            conn = connect(host)
            try:
                conn.run("rm -rf /root/standin-wheels && mkdir -p /root/standin-wheels", hide=True, in_stream=False)
                for wheel in built:
                    conn.put(str(wheel), remote=f"/root/standin-wheels/{wheel.name}")
                conn.put(io.BytesIO(script.encode()), remote=layout.env_script)
                conn.run(f"rm -rf {prefix} && python3 -m venv --without-pip {prefix} && "
                         f"site=$({layout.python} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && "
                         f"for w in /root/standin-wheels/*.whl /root/standin-wheels/closure.zip; do python3 -m zipfile -e $w $site; done", hide=True,
                         in_stream=False)
            finally:
                conn.close()


def put_wheel(host, directory, dist, version, init=None):
    """A pure-Python wheel of `dist` at `version` (its package's __init__ is `init`, else only __version__), copied
    to the node: what a `pip install` of another build leaves in the env. Returns its path on the node."""
    from dapo_ops.fleet.ssh import connect
    from dapo_sim.wheels import build_wheel

    wheel = build_wheel(directory, dist, version, {f"{dist}/__init__.py": init or f'__version__ = "{version}"\n'})
    conn = connect(host)
    try:
        conn.put(str(wheel), remote=f"/root/{wheel.name}")
    finally:
        conn.close()
    return f"/root/{wheel.name}"


def set_npu(host, npu, **values):
    """The emulated npu-smi and hccn_tool read the node's hardware model on every call: change an NPU at run time."""
    import json

    sh(host, f"python3 -c 'import json, sys; p = \"/dev/.dapo-sim/hw.json\"; d = json.load(open(p)); "
             f"d[\"npus\"][{npu}].update(json.loads(sys.argv[1])); json.dump(d, open(p, \"w\"))' "
             f"'{json.dumps(values)}'")


def launch_training(tmp_path, seconds: int = 600, **trainer) -> str:
    """The shipped job "training" for `seconds` (the sim's stand-in entry point: DAPO_SIM_TRAIN_SECONDS), its
    `trainer` fields changed, launched on the 2 nodes without the audit; its run id."""
    import json
    import subprocess
    import sys

    import yaml

    from dapo_ops.paths import PROJECT_ROOT

    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml").read_text())
    spec["trainer"].update(trainer)
    spec["env"].setdefault("extra", {})["DAPO_SIM_TRAIN_SECONDS"] = str(seconds)
    job = tmp_path / "training.yaml"
    job.write_text(yaml.safe_dump(spec))
    launched = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "launch", str(job), "--nodes", "2", "--no-audit",
                               "--json"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert launched.returncode == 0, launched.stderr
    return json.loads(launched.stdout)["run_id"]
