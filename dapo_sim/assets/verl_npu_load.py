"""The simulated fleet's stand-in for the NPU work of a DAPO step (served in the sim's verl repository as
recipe/dapo/sim_npu_load.py): each step marks every NPU node busy with a load marker in the node's hardware directory,
which the emulated npu-smi turns into AICore %, HBM, temperature and power (dapo_sim/assets/ascend_emu.py `live`).
verl's own workers hold the NPUs of every node during a step (its RayWorkerGroup); a Ray task per node stands for
them here."""

import ray


def npu_nodes():
    return [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("NPU")]


def mark_busy(nodes, since, until):
    """Every NPU node's marker, fire and forget: a lost node's task fails on its own and holds no step. The task is
    a function made here, which Ray ships by value: a node need not import this module."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def write_marker(since, until):
        import json
        import os

        directory = os.path.join(os.environ.get("DAPO_SIM_HW_DIR", "/dev/.dapo-sim"), "load")
        if not os.path.isdir(directory):
            return
        path = os.path.join(directory, "dapo-job.json")
        partial = "%s.%d.part" % (path, os.getpid())
        with open(partial, "w") as f:
            json.dump({"since": since, "until": until, "aicore_pct": 85, "hbm_fraction": 0.85}, f)
        os.replace(partial, path)

    task = ray.remote(num_cpus=0)(write_marker)
    for node in nodes:
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(since, until)
