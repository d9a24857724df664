"""Checkpoint stand-in (dapo-ops simulated fleet), served as recipe/dapo/sim_checkpoints.py in the sim's verl: what
verl does on disk when it saves and resumes, with files of a few hundred bytes instead of shards (the files below
are verl's at the pinned tag).

- Saving: v0.7.0 verl/trainer/ppo/ray_trainer.py _save_checkpoint (lines 938-1005) and
  verl/utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint. Every rank writes, on its own node and in place,
  `global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt` in torch.save's container (a zip archive);
  before that, rank 0 alone removes the oldest `global_step_M/actor` it saved itself beyond max_actor_ckpt_to_keep
  (lines 204-214), on its own node only. Then the driver writes `global_step_N/data.pt` and, last,
  `latest_checkpointed_iteration.txt`.
- Ranks go to nodes in the order of their Ray addresses as strings (verl/single_controller/ray/base.py
  sort_placement_group_by_node_ip), n_gpus_per_node each.
- Resuming: ray_trainer.py _load_checkpoint (lines 1007-1062) with its messages; every rank loads its three files on
  its node, and a missing or cut-short file fails as torch.load fails on it (FileNotFoundError, or PyTorch's
  "PytorchStreamReader failed reading zip archive: failed finding central directory").

torch is a stand-in on the simulated fleet, so zipfile writes the container; what is inside is not torch's.
"""
import os
import shutil
import zipfile

TRACKER = "latest_checkpointed_iteration.txt"
KINDS = ("model", "optim", "extra_state")


def _save_archive(path, payload):
    with zipfile.ZipFile(path, "w") as archive:  # torch.save: a zip archive, written in place
        archive.writestr("archive/data.pkl", payload)


def _load_archive(path):
    if not os.path.exists(path):
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}'")
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.read("archive/data.pkl")
    except zipfile.BadZipFile:
        raise RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory") from None


def shard_names(world, rank):
    return [f"{kind}_world_size_{world}_rank_{rank}.pt" for kind in KINDS]


def save_ranks(actor_dir, world, ranks, step, prune=()):
    """What the ranks on one node do in save_checkpoint: rank 0 prunes first (its node only), then each writes."""
    if 0 in ranks:
        for path in prune:
            print(f"Checkpoint manager remove previous save local path: {os.path.abspath(path)}", flush=True)
            shutil.rmtree(path, ignore_errors=True)
    os.makedirs(actor_dir, exist_ok=True)
    for rank in ranks:
        for name in shard_names(world, rank):
            _save_archive(os.path.join(actor_dir, name), f"step {step} rank {rank} {name}".encode())
    return len(ranks)


def load_ranks(actor_dir, world, ranks):
    for rank in ranks:
        for name in shard_names(world, rank):
            _load_archive(os.path.join(actor_dir, name))
    return len(ranks)


def ranks_by_node(npus_per_node):
    """node id -> its ranks, as verl places them: nodes sorted by address (as strings), n_gpus_per_node each."""
    import ray

    alive = sorted((n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("NPU")),
                   key=lambda n: n["NodeManagerAddress"])
    return {node["NodeID"]: list(range(i * npus_per_node, (i + 1) * npus_per_node)) for i, node in enumerate(alive)}


def _call(function, *args):
    return function(*args)


def _everywhere(placement, function, args_for):
    """function(*args_for(ranks)) on every node of the placement, as a Ray task pinned to it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_node = ray.remote(num_cpus=0)(_call)
    calls = [on_node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
             .remote(function, *args_for(ranks)) for node, ranks in placement.items()]
    return ray.get(calls)


class Checkpoints:
    """The trainer's side: `load` at the start of fit, `save` on the steps verl saves."""

    def __init__(self, config):
        trainer = config["trainer"]
        self.root = trainer["default_local_dir"]
        self.save_freq = trainer.get("save_freq", -1)
        self.keep = trainer.get("max_actor_ckpt_to_keep")
        self.mode = trainer.get("resume_mode", "auto")
        self.resume_from = trainer.get("resume_from_path")
        self.world = trainer["nnodes"] * trainer["n_gpus_per_node"]
        self.placement = ranks_by_node(trainer["n_gpus_per_node"])
        self.saved = []   # previous_saved_paths: this attempt's saves only

    def saves_at(self, step, last):
        return self.save_freq > 0 and (last or step % self.save_freq == 0)

    def load(self):
        """_load_checkpoint: the global step the run continues after (0: from scratch)."""
        if self.mode == "disable":
            return 0
        folder = None
        tracker = os.path.join(self.root, TRACKER)
        if self.mode == "auto":
            if not os.path.exists(tracker):
                print(f"Checkpoint tracker file does not exist: {tracker}", flush=True)
                print("Training from scratch", flush=True)
                return 0
            with open(tracker, "rb") as fh:
                folder = os.path.join(self.root, f"global_step_{int(fh.read().decode())}")
            if not os.path.exists(folder):
                print("Training from scratch", flush=True)
                return 0
        elif self.mode == "resume_path":
            assert isinstance(self.resume_from, str), "resume ckpt must be str type"
            assert "global_step_" in self.resume_from, "resume ckpt must specify the global_steps"
            folder = self.resume_from
        step = int(folder.split("global_step_")[-1])
        print(f"Load from checkpoint folder: {folder}", flush=True)
        print(f"Setting global step to {step}", flush=True)
        print(f"Resuming from {folder}", flush=True)
        actor = os.path.join(folder, "actor")
        _everywhere(self.placement, load_ranks, lambda ranks: (actor, self.world, ranks))
        data = os.path.join(folder, "data.pt")
        if os.path.exists(data):
            _load_archive(data)
        else:
            print(f"Warning: No dataloader state found at {data}, will start from scratch", flush=True)
        return step

    def save(self, step):
        folder = os.path.join(self.root, f"global_step_{step}")
        print(f"local_global_step_folder: {folder}", flush=True)
        actor = os.path.join(folder, "actor")
        prune = []
        if isinstance(self.keep, int) and self.keep > 0 and len(self.saved) >= self.keep:
            start = len(self.saved) - self.keep + 1
            prune, self.saved = self.saved[:start], self.saved[start:]
        _everywhere(self.placement, save_ranks, lambda ranks: (actor, self.world, ranks, step, prune))
        self.saved.append(actor)
        os.makedirs(folder, exist_ok=True)
        _save_archive(os.path.join(folder, "data.pt"), f"dataloader after step {step}".encode())
        with open(os.path.join(self.root, TRACKER), "w") as fh:
            fh.write(str(step))
