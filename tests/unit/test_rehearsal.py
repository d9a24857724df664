"""The launch rehearsal's pure parts: its config, its event lines and what they add up to, the step reporter, and
the tcp backend's mailbox (over loopback)."""

import json
import struct
import socket
import threading
import time

import pytest

from dapo_ops.errors import UsageError
from dapo_ops.job.render import RenderNode
from dapo_ops.job.spec import load_spec
from dapo_ops.launch import rehearsal, rehearsal_driver, rehearsal_tcp
from dapo_ops.launch.steps import StepEnded, StepNote, StepStarted, Steps
from dapo_ops.paths import PROJECT_ROOT

NODES = [RenderNode("node1", "10.0.0.1", "eth1", "/env.sh", "/opt/env/bin/python", "/opt/env/bin/ray", "/opt/src/verl",
                    True),
         RenderNode("node2", "10.0.0.2", "eth1", "/env.sh", "/opt/env/bin/python", "/opt/env/bin/ray", "/opt/src/verl",
                    False)]


def event_line(event, **fields):
    return "DAPO-REHEARSAL " + json.dumps({"event": event, "time": 0, **fields})


def test_config_lists_the_nodes_in_rank_order_with_the_sp_size_and_deadlines():
    spec = load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml")
    config = rehearsal.config(spec, NODES, "tcp", rehearsal.Timeouts(placement=10, check=5, hccl_connect=7,
                                                                     report_grace=3))
    assert config["nodes"] == [{"name": "node1", "ip": "10.0.0.1", "nic": "eth1"},
                               {"name": "node2", "ip": "10.0.0.2", "nic": "eth1"}]
    assert (config["sp_size"], config["backend"]) == (8, "tcp")
    assert set(config["required_files"]) == set(rehearsal.required_files(spec))
    assert (config["placement_timeout"], config["check_timeout"], config["collective_timeout"]) == (10, 5, 30)
    assert config["hccl_connect_timeout"] == 7
    assert [44217, 44217] in config["ray_ports"] and [10002, 19999] in config["ray_ports"]


def test_the_rehearsal_waits_past_hccls_own_report_of_a_failed_link():
    """HCCL fails a link set-up HCCL_CONNECT_TIMEOUT + 20 s in (CANN's reference): the rehearsal's collective
    deadline, and the driver's wait for it, must outlast that, or the user sees "no answer" instead of HCCL's cause."""
    timeouts = rehearsal.Timeouts()
    assert timeouts.hccl_connect == 120                     # CANN's smallest HCCL_CONNECT_TIMEOUT
    assert timeouts.collective > timeouts.hccl_connect + rehearsal.HCCL_REPORT_DELAY
    config = rehearsal.config(load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"), NODES, "hccl")
    assert config["hccl_connect_timeout"] + 20 < config["collective_timeout"]
    assert timeouts.total > 2 * timeouts.placement + 2 * timeouts.check + timeouts.collective
    assert "ASCEND_TOOLKIT_HOME" in config["required_env"]
    json.dumps(config)


def test_backend_defaults_to_hccl_and_rejects_unknown_ones():
    assert rehearsal.backend_for({}) == "hccl"
    assert rehearsal.backend_for({"dapo_rehearsal_backend": "tcp"}) == "tcp"
    with pytest.raises(UsageError, match="'nccl' is not one of hccl, gloo, tcp"):
        rehearsal.backend_for({"dapo_rehearsal_backend": "nccl"})


@pytest.mark.parametrize("line", ["", "2026-11-29 INFO worker.py: connecting", "DAPO-REHEARSAL {not json",
                                  "DAPO-REHEARSAL [1, 2]", 'DAPO-REHEARSAL {"no_event": 1}'])
def test_other_lines_are_not_events(line):
    assert rehearsal.parse_event(line) is None


def test_a_passing_rehearsal_adds_up_to_hosts_ranks_and_timings():
    per_rank = [{"rank": r, "host": "node1" if r < 2 else "node2", "device": f"/dev/davinci{r % 2}", "pid": 100 + r,
                 "timings": {"check": 0.01, "all_reduce": 0.1 * (r + 1), "all_to_all": 0.02}} for r in range(4)]
    lines = ["noise", event_line("placing", ranks=4, nodes=2),
             event_line("placed", ranks=4, hosts={"node1": 2, "node2": 2}, seconds=3.5),
             event_line("checked", ranks=4, seconds=4.0),
             event_line("result", ok=True, backend="tcp", per_rank=per_rank, sp_groups=2, seconds=5.0)]
    outcome = rehearsal.outcome([e for e in map(rehearsal.parse_event, lines) if e])
    assert outcome.ok and outcome.ranks == 4 and outcome.hosts == {"node1": 2, "node2": 2}
    assert outcome.placed_seconds == 3.5 and outcome.seconds == 5.0 and outcome.backend == "tcp"
    timings = outcome.timing_summary()
    assert timings["all_reduce"] == {"median": 0.25, "max": 0.4, "slowest_rank": 3, "slowest_host": "node2"}
    assert outcome.as_record()["timings"] == timings and len(outcome.as_record()["per_rank"]) == 4


def test_a_failed_rehearsal_names_rank_and_host():
    failures = [{"phase": "check", "rank": r, "host": "node2", "error": f"/dev/davinci{r - 16} is missing"}
                for r in (17, 18, 19, 20)]
    outcome = rehearsal.outcome([{"event": "placing", "ranks": 32}, {"event": "result", "ok": False,
                                                                       "failures": failures}])
    assert not outcome.ok
    assert outcome.describe_failure() == ("rank 17 on node2: /dev/davinci1 is missing; rank 18 on node2: "
                                          "/dev/davinci2 is missing; rank 19 on node2: /dev/davinci3 is missing "
                                          "(and 1 more)")


def test_a_placement_failure_has_no_rank_and_a_missing_result_says_so():
    outcome = rehearsal.outcome([{"event": "result", "ok": False, "failures": [
        {"phase": "placement", "rank": None, "host": None, "error": "only 1 of 2 placement groups"}]}])
    assert outcome.describe_failure() == "placement: only 1 of 2 placement groups"
    died = rehearsal.outcome([{"event": "placing", "ranks": 32}])
    assert not died.ok and died.describe_failure() == "the rehearsal driver ended without a result"


def test_steps_report_start_notes_and_end_with_time_or_failure():
    seen = []
    steps = Steps(seen.append)
    with steps.step("start the head") as step:
        steps.note("waiting")
        step.done("up")
    with pytest.raises(RuntimeError), steps.step("workers"):
        raise RuntimeError("node2 unreachable")
    assert seen[:2] == [StepStarted("start the head"), StepNote("start the head", "waiting")]
    assert seen[2].title == "start the head" and seen[2].ok and seen[2].text == "up" and seen[2].seconds >= 0
    assert seen[3] == StepStarted("workers")
    assert seen[4].title == "workers" and not seen[4].ok and seen[4].text == "node2 unreachable"
    assert len(seen) == 5 and all(isinstance(e, StepEnded) for e in (seen[2], seen[4]))
    assert set(steps.seconds) == {"start the head"}


def test_the_tcp_mailbox_collects_messages_by_tag_and_sender():
    mailbox = rehearsal_tcp.Mailbox("127.0.0.1", [])
    senders = [threading.Thread(target=rehearsal_tcp.send,
                                args=(("127.0.0.1", mailbox.port), rank, "all_to_all",
                                      rehearsal_tcp.chunk(rank, 0, 100000), 5)) for rank in (1, 2, 3)]
    for sender in senders:
        sender.start()
    got = mailbox.wait_for("all_to_all", [1, 2, 3], time.monotonic() + 10)
    assert got == {r: rehearsal_tcp.chunk(r, 0, 100000) for r in (1, 2, 3)}
    with pytest.raises(TimeoutError, match=r"nothing from rank\(s\) \[4\]"):
        mailbox.wait_for("all_to_all", [4], time.monotonic() + 0.2)


class FakeSocket:
    """Binds to the next port of a scripted sequence (what the kernel's port 0 would draw)."""
    draws: list = []
    made: list = []

    def __init__(self, *args):
        self.port, self.closed = None, False
        FakeSocket.made.append(self)

    def setsockopt(self, *args):
        pass

    def bind(self, address):
        self.port = FakeSocket.draws.pop(0)

    def getsockname(self):
        return ("127.0.0.1", self.port)

    def close(self):
        self.closed = True


def test_a_rank_never_listens_on_one_of_rays_pinned_ports(monkeypatch):
    """The kernel's ephemeral range holds Ray's metrics ports, which the run's firewall table drops from other
    nodes: a rank that drew 44217 was reached by nobody (a CI run's rehearsal failed exactly so)."""
    monkeypatch.setattr(rehearsal_tcp.socket, "socket", FakeSocket)
    FakeSocket.draws, FakeSocket.made = [44217, 44227, 10005, 41000], []
    sock = rehearsal_tcp.bound_socket("127.0.0.1", [[44217, 44217], [44227, 44227], [10002, 19999]])
    assert sock.getsockname()[1] == 41000 and not sock.closed
    assert [s.closed for s in FakeSocket.made] == [True, True, True, False]  # the rejected ones, closed at the end
    FakeSocket.draws = [44217] * rehearsal_tcp.BIND_ATTEMPTS
    with pytest.raises(OSError, match="no free port on 127.0.0.1 outside Ray's ports"):
        rehearsal_tcp.bound_socket("127.0.0.1", [[44217, 44217]])


def test_interface_address_of_loopback_and_of_a_missing_interface():
    assert rehearsal_tcp.interface_address("lo") == "127.0.0.1"
    assert rehearsal_tcp.interface_address("no-such-if0") is None


@pytest.mark.parametrize("text, own_line, target", [
    ("/var/lib/dapo-ops/runs/job-1/ray-start.sh", "pkill -f -- {p}", "bash /var/lib/dapo-ops/runs/job-1/ray-start.sh"),
    ("/opt/conda/envs/dapo+x/bin/ray start", "pkill -f -- {p}; ray stop",
     "/opt/conda/envs/dapo+x/bin/python3.11 /opt/conda/envs/dapo+x/bin/ray start --address=10.0.0.1:6379"),
])
def test_kill_patterns_match_the_starters_but_not_the_shell_that_kills(text, own_line, target):
    import subprocess

    from dapo_ops.launch.teardown import _unmatchable_by_itself

    pattern = _unmatchable_by_itself(text)
    lines = "\n".join([own_line.format(p=pattern), target, target.replace("ray", "rey")]) + "\n"
    grep = subprocess.run(["grep", "-E", "--", pattern], input=lines, capture_output=True, text=True)
    assert grep.stdout == target + "\n"


class StandInRay:
    """Just what the rank actor touches: the decorator, the node address and the accelerator ids."""

    def __init__(self):
        self.npu_ids = ["0"]
        self.util = type("util", (), {"get_node_ip_address": staticmethod(lambda: "127.0.0.1")})

    def remote(self, **_):
        return lambda cls: cls

    def get_runtime_context(self):
        ids = self.npu_ids
        return type("context", (), {"get_accelerator_ids": staticmethod(lambda: {"NPU": ids})})


def ranks(world, tmp_path, monkeypatch, backend="tcp"):
    monkeypatch.setenv("DAPO_TEST_CANN", str(tmp_path))
    for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        monkeypatch.setenv(name, "lo")
    monkeypatch.setenv("HCCL_IF_IP", "127.0.0.1")
    ray = StandInRay()
    node = {"name": "node1", "ip": "127.0.0.1", "nic": "lo"}
    config = {"backend": backend, "required_env": ["DAPO_TEST_CANN"], "chunk_bytes": 4096, "collective_timeout": 10,
              "ray_ports": [[6379, 6384], [10002, 19999]]}
    rank_class = rehearsal_driver.build_actor_class(ray)
    return ray, [rank_class(rank, world, node, config) for rank in range(world)]


def run_collectives(actors, endpoints, groups):
    results, errors = {}, {}

    def one(actor):
        try:
            results[actor.rank] = actor.collectives(endpoints, groups)
        except Exception as exc:  # noqa: BLE001 — what a rank raised is what the driver reports
            errors[actor.rank] = str(exc)
    threads = [threading.Thread(target=one, args=(a,)) for a in actors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results, errors


def test_a_rank_reports_each_problem_of_its_host_environment_and_device(tmp_path, monkeypatch):
    ray, [actor] = ranks(1, tmp_path, monkeypatch)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5,6,7")
    monkeypatch.delenv("DAPO_TEST_CANN")
    ray.npu_ids = ["6"]
    check = actor.check()
    assert actor.device_index == 2 and check["device"] == "/dev/davinci6"
    assert check["problems"][0] == "DAPO_TEST_CANN is not set (the CANN environment was not sourced)"
    assert "GLOO_SOCKET_IFNAME='eth9', expected 'lo'" in check["problems"]
    assert check["problems"][-1] == "/dev/davinci6 is missing (NPU 6 not visible on this node)"
    monkeypatch.delenv("HCCL_IF_IP")
    assert "HCCL_IF_IP=None, expected '127.0.0.1' (the address of the HCCL NIC)" in actor.check()["problems"]
    monkeypatch.setenv("HCCL_IF_IP", "10.77.0.11")
    assert "HCCL_IF_IP='10.77.0.11', expected '127.0.0.1' (the address of the HCCL NIC)" in actor.check()["problems"]
    ray.npu_ids = []
    assert "Ray gave this rank NPU ids [], expected exactly one" in actor.check()["problems"]


def test_tcp_all_reduce_and_sp_all_to_all_between_four_ranks(tmp_path, monkeypatch):
    _, actors = ranks(4, tmp_path, monkeypatch)
    endpoints = [a.endpoint() for a in actors]
    results, errors = run_collectives(actors, endpoints, [[0, 1], [2, 3]])
    assert errors == {}
    assert sorted(results) == [0, 1, 2, 3]
    assert all(set(r["timings"]) == {"all_reduce", "all_to_all"} for r in results.values())


def test_an_unreachable_rank_is_named_by_the_ranks_that_cannot_reach_it(tmp_path, monkeypatch):
    _, actors = ranks(3, tmp_path, monkeypatch)
    with socket.socket() as unused:  # rank 2 never opened its port: a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        silent = ["127.0.0.1", unused.getsockname()[1]]
    endpoints = [actors[0].endpoint(), actors[1].endpoint(), silent]
    results, errors = run_collectives(actors[:2], endpoints, [[0, 1, 2]])
    assert results == {}
    port = endpoints[2][1]
    assert errors == {0: f"cannot reach rank 2 at 127.0.0.1:{port} (Connection refused)",
                      1: f"cannot reach rank 2 at 127.0.0.1:{port} (Connection refused)"}


def test_failures_that_say_what_broke_come_before_those_that_only_waited():
    failures = [{"phase": "collective", "rank": 0, "host": "n1", "error": "no answer within 135 s", "waited": True},
                {"phase": "collective", "rank": 9, "host": "n2", "error": "ConnectionError: cannot reach rank 3",
                 "waited": False},
                {"phase": "collective", "rank": 1, "host": "n1", "error": "TimeoutError: all_reduce: nothing from "
                                                                         "rank(s) [9]", "waited": True},
                # the words do not decide: this rank broke, although its message mentions a timeout
                {"phase": "collective", "rank": 5, "host": "n2", "error": "ValueError: HCCL_CONNECT_TIMEOUT='x'",
                 "waited": False}]
    assert [f["rank"] for f in rehearsal_driver.by_cause(failures)] == [5, 9, 0, 1]


def safetensors_file(path, tensors: dict[str, int]) -> None:
    """A safetensors file as the format lays it out: header length (u64 LE), JSON header, the tensors' bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def model_dir(root):
    model = root / "Qwen3-30B-A3B"
    model.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    safetensors_file(model / "model-00001-of-00002.safetensors", {"a.weight": 64, "b.weight": 32})
    safetensors_file(model / "model-00002-of-00002.safetensors", {"c.weight": 16})
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 112}, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00001-of-00002.safetensors",
        "c.weight": "model-00002-of-00002.safetensors"}}))
    return model


def test_a_rank_names_the_model_and_data_files_its_node_lacks(tmp_path, monkeypatch):
    ray, [actor] = ranks(1, tmp_path, monkeypatch)
    model = model_dir(tmp_path)
    train = tmp_path / "train.parquet"
    train.write_bytes(b"PAR1")
    actor.config["required_files"] = {str(train): "the training data (data.train_files)",
                                      str(tmp_path / "val.parquet"): "the validation data (data.val_files)"}
    actor.config["model_dir"] = str(model)
    problems = actor.check()["problems"]
    assert f"{tmp_path / 'val.parquet'} is missing: the validation data (data.val_files) must be on every node" \
        in problems
    assert not any(str(model) in p or "train.parquet" in p for p in problems), problems
    (model / "tokenizer.json").unlink()
    shard = model / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4])                        # a copy cut short
    problems = actor.check()["problems"]
    assert f"{model}/tokenizer.json is missing (and no vocab.json with merges.txt): verl builds the tokenizer on " \
        "every node" in problems
    assert any(p.startswith(f"{shard} is ") and "its header says" in p for p in problems), problems


def test_the_model_check_reads_every_shard_the_index_names_and_nothing_outside(tmp_path):
    from dapo_ops.job.node_files import model_problems

    model = model_dir(tmp_path)
    assert model_problems(str(model)) == []
    (model / "model-00002-of-00002.safetensors").unlink()
    assert model_problems(str(model)) == [f"{model}/model-00002-of-00002.safetensors is missing: a weight shard the "
                                          "index names"]
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../../etc/passwd"}}))
    assert model_problems(str(model)) == [f"{model}/model.safetensors.index.json names '../../etc/passwd', which is "
                                          "not a file in the model directory"]
    (model / "model.safetensors.index.json").write_text("[1, 2]")
    assert "is not a safetensors index" in model_problems(str(model))[0]
    (model / "model.safetensors.index.json").unlink()
    assert model_problems(str(model)) == [f"{model} holds no weights (model.safetensors.index.json or "
                                          "model.safetensors): vLLM's ranks and the actor's rank 0 load them on "
                                          "this node"]
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40))     # a header length no file has
    assert "truncated or not a safetensors file" in model_problems(str(model))[0]
    safetensors_file(model / "model.safetensors", {"w": 8})
    (model / "tokenizer.json").unlink()
    (model / "vocab.json").write_text("{}")
    (model / "merges.txt").write_text("#version: 0.2\n")
    assert model_problems(str(model)) == []                              # a BPE vocabulary is a tokenizer too


def test_a_rank_missing_the_jobs_files_points_at_stage_and_other_failures_do_not(tmp_path):
    from dapo_ops.job.node_files import file_problems, model_problems

    for problem in (file_problems({str(tmp_path / "t.parquet"): "the training data (data.train_files)"}, None)[0],
                    model_problems(str(tmp_path))[0]):
        failed = rehearsal.Outcome(ok=False, failures=[{"phase": "check", "rank": 3, "host": "node2",
                                                        "error": problem}])
        assert failed.describe_failure().endswith(rehearsal.STAGE_HINT), problem
    hccl = rehearsal.Outcome(ok=False, failures=[{"phase": "allreduce", "rank": 0, "host": "node1",
                                                  "error": "EI0006: socket timeout"}])
    assert "dapo-ops stage" not in hccl.describe_failure()
