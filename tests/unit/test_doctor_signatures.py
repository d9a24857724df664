"""The doctor's signature files (issue 16): every signature is complete, sourced and reachable, and a bad file is
refused with one line naming it."""

import re

import pytest
import yaml

from dapo_ops.doctor.signatures import (PUBLIC_SOURCE, SIGNATURE_DIR, SignatureError, default_catalog,
                                        load_catalog)

LAYERS = {"hccl", "acl", "torch_npu", "driver", "cann_env", "vllm", "ray", "verl", "host"}


@pytest.fixture(scope="module")
def catalog():
    return default_catalog()


def test_one_file_per_layer_and_at_least_thirty_signatures(catalog):
    assert {p.stem for p in SIGNATURE_DIR.glob("*.yml")} == LAYERS
    assert len(catalog.signatures) >= 30
    assert {s.layer for s in catalog.signatures} == LAYERS


def test_every_signature_is_complete(catalog):
    for s in catalog.signatures:
        assert s.id and s.layer in LAYERS, s
        assert s.match.groups or s.match.regex is not None, s.id
        assert s.meaning.strip() and s.fix.strip(), s.id
        assert any(PUBLIC_SOURCE.match(src) for src in s.source), s.id
        assert isinstance(s.fatal, bool) and isinstance(s.noise, bool), s.id
        assert all(c in catalog.by_id for c in s.causes), s.id
        assert not (s.noise and s.fatal), s.id


def test_no_fix_sends_an_operator_to_the_simulator(catalog):
    named = [s.id for s in catalog.signatures if re.search(r"dapo[-_]sim|simulated", f"{s.meaning} {s.fix}")]
    assert not named, named


def test_the_issue_s_signatures_are_there(catalog):
    for code in ("EI0006", "EI0002", "EJ0001", "EL0004", "507033", "507013", "507053", "507054", "207000", "507899",
                 "ERR02200", "0x80E01801"):
        assert catalog.with_code(code), code
    for wanted in ("hccl-init-error-code", "libhccl-missing", "libatb-missing", "undefined-symbol-skew",
                   "numpy2-in-env", "ray-memory-monitor-kill", "ray-node-marked-dead", "ray-tmp-over-95",
                   "ray-no-npu-resources", "dapo-max-gen-batches", "verl-prompt-too-long",
                   "verl-file-logger-numpy-int", "tbe-subprocess-exit-noise"):
        assert wanted in catalog.by_id, wanted
    assert catalog.by_id["tbe-subprocess-exit-noise"].noise
    assert catalog.by_id["acl-drv-internal"].noise_without_npus


@pytest.mark.parametrize("line, expected", [
    ("EI0006: [PID: 4121] 2025-11-02-10:14:03.101.223 Getting socket times out. Reason: Remote Rank did not send",
     "hccl-socket-timeout"),
    ("RuntimeError: ... NPU function error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout, error code is 507054",
     "acl-hbm-uce"),
    ("[ERROR] 2025-11-02-10:14:03 (PID:4121, Device:5, RankID:21) ERR00100 PTA call acl api failed",
     "torch-npu-error-code"),
    ("HCCL function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &comm), error code is 11",
     "hccl-init-error-code"),
    ("(TaskRunner pid=88) ValueError: num_gen_batches=10 >= max_num_gen_batches=10. Generated too many.",
     "dapo-max-gen-batches"),
    ("[ERROR] TBE Subprocess[task_distribute] raise error[], main process disappeared!", "tbe-subprocess-exit-noise"),
    # issue 31: what the new signatures must and must not take from the older ones
    ("HCCL function error: HcclGetRootInfo(&hcclID), error code is 11", "hccl-init-error-code"),
    ("HCCL function error: HcclAllreduce(...), error code is 6", "hccl-op-error-code"),
    ("RuntimeError: aclrtMapMem failed with acl error code: 207000 camem_allocator.cpp:77", "acl-feature-not-supported"),
    ("RuntimeError: aclrtUnmapMem failed with acl error code: 507000 camem_allocator.cpp:91", "vllm-camem-call-failed"),
    ("[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in "
     "use).", "torch-store-port-in-use"),
    ("OSError: [Errno 98] Address already in use", "host-address-in-use"),
    ("[ 9001.000001] Memory cgroup out of memory: Killed process 4121 (ray::WorkerDict)", "host-oom-killer"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
     "ray-memory-monitor-kill"),
    ("RuntimeError: The Inner error is reported as above. error code is 507015", "acl-aicore-exception"),
    ("ImportError: cannot import name 'runtime_version' from 'google.protobuf'", "protobuf-gencode-runtime-mismatch"),
    ("ImportError: libhccl.so: cannot open shared object file: No such file or directory", "libhccl-missing"),
])
def test_a_line_finds_its_signature(catalog, line, expected):
    signature, _ = catalog.match(line)
    assert signature.id == expected


def test_an_ai_cpu_kernel_is_not_taken_for_an_ai_core_one(catalog):
    line = ("[ERROR] RUNTIME(24810,python):2025-11-02-10:14:03.101.223 aicpu kernel execute failed, device_id=0, "
            "stream_id=628, task_id=13, fault so_name=, fault kernel_name=Slice, extend_info=()")
    found = catalog.match(line)
    assert found is None or found[0].id != "acl-aicore-exception"
    _, details = catalog.match("[ERROR] RUNTIME(1,python):x Aicore kernel execute failed, device_id=0, stream_id=2, "
                               "task_id=1, flip_num=0, fault kernel_name=Add_ee98c6628030785f_high_performance_2100")
    assert details == {"op": "Add"}


def test_regex_groups_become_details(catalog):
    _, details = catalog.match("hcclCommInitRootInfoConfig failed, error code is 11")
    assert details == {"hccl_result": "11"}
    assert catalog.match("an ordinary INFO line") is None


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


GOOD = {"id": "x-one", "match": {"all": ["boom"]}, "meaning": "m", "fix": "f",
        "source": "https://example.org/doc"}


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("fix"), "hccl.yml: signature 1 (x-one): missing fix"),
    (lambda s: s.update(colour="red"), "unknown key colour"),
    (lambda s: s.update(id="X One"), "id must be lower-case"),
    (lambda s: s.update(match={"all": ["a"], "regex": "b"}), "match must be exactly one of"),
    (lambda s: s.update(match={"regex": "("}), "match.regex does not compile"),
    (lambda s: s.update(source="my own memory"), "source must name a public URL"),
    (lambda s: s.update(fatal="yes"), "fatal must be true or false"),
    (lambda s: s.update(causes=["nowhere"]), "causes names no signature: nowhere"),
])
def test_a_bad_signature_is_one_line_naming_file_and_signature(tmp_path, change, message):
    signature = dict(GOOD)
    change(signature)
    write(tmp_path, "hccl.yml", {"layer": "hccl", "signatures": [signature]})
    with pytest.raises(SignatureError, match=re.escape(message)) as raised:
        load_catalog(tmp_path)
    assert "\n" not in str(raised.value)


def test_bad_files(tmp_path):
    write(tmp_path, "ray.yml", "layer: ray\nsignatures: [\n")
    with pytest.raises(SignatureError, match=r"ray.yml: not valid YAML at line \d"):
        load_catalog(tmp_path)
    write(tmp_path, "ray.yml", {"layer": "host", "signatures": [GOOD]})
    with pytest.raises(SignatureError, match="layer 'host' must be the file's name"):
        load_catalog(tmp_path)
    write(tmp_path, "ray.yml", {"layer": "ray", "signatures": [GOOD]})
    write(tmp_path, "host.yml", {"layer": "host", "signatures": [GOOD]})
    with pytest.raises(SignatureError, match="id 'x-one' is also in"):
        load_catalog(tmp_path)
    with pytest.raises(SignatureError, match="no signature files"):
        load_catalog(tmp_path / "empty")
