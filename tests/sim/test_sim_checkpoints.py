"""The simulated fleet's checkpoint stand-in (dapo_sim/assets/verl_checkpoints.py, verl's on-disk behaviour) read
back by the product's reader (dapo_ops/launch/saved_steps.py): the writer and the reader agree on verl's layout."""

import importlib.util
import subprocess

import pytest

from dapo_ops.launch.saved_steps import last_complete, listing_command, parse_listing, saved_steps
from dapo_sim.artifacts import ASSETS

WORLD = 8
PLACEMENT = {"node-a": [0, 1, 2, 3], "node-b": [4, 5, 6, 7]}


@pytest.fixture
def standin(monkeypatch):
    spec = importlib.util.spec_from_file_location("sim_checkpoints", ASSETS / "verl_checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # every "node" writes into the one directory: storage all nodes share; each call as its Ray task would make it
    monkeypatch.setattr(module, "ranks_by_node", lambda npus: PLACEMENT)
    monkeypatch.setattr(module, "_everywhere",
                        lambda placement, function, args_for: [function(*args_for(r)) for r in placement.values()])
    return module


def config(root, **trainer):
    return {"trainer": {"default_local_dir": str(root), "save_freq": 2, "max_actor_ckpt_to_keep": 2,
                        "resume_mode": "disable", "nnodes": 2, "n_gpus_per_node": 4, **trainer}}


def read(root):
    out = subprocess.run(["bash", "-c", listing_command(str(root))], capture_output=True, text=True, check=True)
    return saved_steps({"node-a": parse_listing(out.stdout)}, WORLD)


def test_saves_every_save_freq_steps_prune_before_writing_and_the_reader_sees_the_last_complete(standin, tmp_path):
    checkpoints = standin.Checkpoints(config(tmp_path))
    for step in range(1, 8):
        if checkpoints.saves_at(step, step == 7):
            checkpoints.save(step)
    steps = read(tmp_path)
    # saved 2, 4, 6, 7; keeping 2, rank 0 removed the actor shards of 2 and 4 (their data.pt stays, as in verl)
    assert [(s.step, s.complete) for s in steps] == [(2, False), (4, False), (6, True), (7, True)]
    assert steps[0].missing[0] == "model shard of rank(s) 0-7"
    assert last_complete(steps).step == 7 and last_complete(steps).holders == {"node-a": list(range(8))}
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "7"


def test_a_shard_cut_short_makes_its_step_incomplete_and_fails_a_resume_from_it(standin, tmp_path):
    checkpoints = standin.Checkpoints(config(tmp_path))
    for step in (2, 4):
        checkpoints.save(step)
    shard = tmp_path / "global_step_4" / "actor" / "optim_world_size_8_rank_5.pt"
    shard.write_bytes(shard.read_bytes()[:-7])
    steps = read(tmp_path)
    assert [s.step for s in steps if s.complete] == [2]
    assert steps[-1].missing == ["optim shard of rank(s) 5"]
    resume = standin.Checkpoints(config(tmp_path, resume_mode="resume_path",
                                        resume_from_path=str(tmp_path / "global_step_4")))
    with pytest.raises(RuntimeError, match="PytorchStreamReader failed reading zip archive"):
        resume.load()
    # verl's `auto` trusts the tracker (step 4); a resume_path at the last complete step continues after it
    assert standin.Checkpoints(config(tmp_path, resume_mode="resume_path",
                                      resume_from_path=str(tmp_path / "global_step_2"))).load() == 2
    assert standin.Checkpoints(config(tmp_path, resume_mode="disable")).load() == 0
