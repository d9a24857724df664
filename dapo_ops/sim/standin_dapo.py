"""The simulated fleet's stand-in for verl's DAPO entry point (recipe/dapo/main_dapo.py), served in the sim's verl
repository (sim/repos.py)."""

from pathlib import Path

DAPO_TRAINER_YAML = (Path(__file__).resolve().parents[1] / "job" / "recipe" / "dapo_trainer.yaml").read_text()

MAIN_DAPO = '''"""DAPO entry point stand-in (dapo-ops simulated fleet), shaped like verl v0.7.0 recipe/dapo/main_dapo.py.

torch_npu is a stand-in on the simulated fleet, so no training runs. What the real entry point does before the
first training step, and what the product depends on, happens for real:
- `main` composes the job's Hydra configuration and starts a `TaskRunner` Ray actor (num_cpus=1). Ray may place it
  on any node (upstream: "please make sure main_task is not scheduled on head"); the stand-in puts it on a node
  other than the driver's whenever there is one (DAPO_SIM_TASKRUNNER_NODE=<hostname> picks one), so a job that
  only works on the head fails here as it would on a real cluster.
- `TaskRunner.run` loads the model's config.json (transformers' AutoConfig/AutoTokenizer, via verl's
  hf_tokenizer) and the parquet files (datasets.load_dataset, via verl's RLHFDataset) on the node it runs on;
- it opens verl's file logger like verl/utils/tracking.py FileLogger: VERL_FILE_LOGGER_PATH with "w", no
  directory created;
- it starts the vLLM rollout worker's model loading as vllm-ascend does (v0.11.0rc1 vllm_ascend/worker/worker_v1.py
  load_model: sleep mode takes CaMemAllocator), so PYTORCH_NPU_ALLOC_CONF=expandable_segments:True fails with
  vllm-ascend's own assertion.
Then it logs step 0 (the dry mode's `dapo_ops/*` facts) as verl's console and file loggers do and exits 0 (the
documented dry mode), after "training" for DAPO_SIM_TRAIN_SECONDS (default 0) in the TaskRunner: a 2 s sleep per
step, each logged with its measured `timing_s/step` (for `report --follow` and tests of a node lost in training).
"""
import json
import numbers
import os
import pprint
import socket
import sys
import time

import hydra
import ray
from omegaconf import OmegaConf


@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)
def main(config):
    run_ppo(config)


def _taskrunner_node():
    wanted = os.environ.get("DAPO_SIM_TASKRUNNER_NODE")
    here = ray.get_runtime_context().get_node_id()
    alive = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeManagerAddress"])
    if wanted:
        for node in alive:
            if node.get("NodeManagerHostname") == wanted:
                return node["NodeID"]
        raise RuntimeError("DAPO_SIM_TASKRUNNER_NODE=%s is not a node of this Ray cluster" % wanted)
    others = [n["NodeID"] for n in alive if n["NodeID"] != here]
    return others[-1] if others else here


def run_ppo(config) -> None:
    if not ray.is_initialized():
        ray.init()
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node_id=_taskrunner_node(), soft=False)
        runner = TaskRunner.options(scheduling_strategy=strategy).remote()
        summary = ray.get(runner.run.remote(OmegaConf.to_container(config, resolve=True)))
        print("dapo-ops dry mode: DAPO config composed (nnodes=%(nnodes)s, n_gpus_per_node=%(npus)s, "
              "train_batch_size=%(batch)s), TaskRunner on %(host)s; no training on the simulated fleet" % summary,
              flush=True)
        # A real run lasts hours; this one a second: give Ray's log monitor time to forward the actor's lines.
        time.sleep(3)
    finally:
        if ray.is_initialized():
            ray.shutdown()


class UsageError(Exception):
    """Named as wandb.errors.UsageError, which wandb.init raises when it finds no key."""


def _log(step, data, logger):
    """What verl's Tracking does with a step's metrics for the console and file loggers: the console line of
    verl/utils/logger/aggregate_logger.py concat_dict_to_str (numbers only, pprint-formatted), and a JSON line of
    verl/utils/tracking.py FileLogger.log (buffered, no flush: the file fills when the logger closes)."""
    values = ["%s:%s" % (k, pprint.pformat(v)) for k, v in data.items() if isinstance(v, numbers.Number)]
    print(" - ".join(["step:%d" % step] + values), flush=True)
    if logger is not None:
        logger.write(json.dumps({"step": step, "data": data}) + "\\n")


def _wandb_api_key():
    """wandb 0.31.0's key lookup without a terminal (wandb/sdk/lib/wbauth/authenticate.py, wbnetrc.py):
    WANDB_API_KEY, else the netrc file at $NETRC (else ~/.netrc) for the host[:port] of WANDB_BASE_URL."""
    import netrc
    from urllib.parse import urlsplit

    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    path = os.path.expanduser(os.environ.get("NETRC") or "~/.netrc")
    machine = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    try:
        creds = netrc.netrc(path).authenticators(machine)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        creds = None
    if not creds or not creds[2]:
        raise UsageError("No API key configured. Use `wandb login` to log in.")
    return creds[2]


def _files(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


@ray.remote(num_cpus=1)
class TaskRunner:
    def run(self, config):
        print("TaskRunner hostname: %s, PID: %s" % (socket.gethostname(), os.getpid()), flush=True)
        model_path = config["actor_rollout_ref"]["model"]["path"]
        if not os.path.isdir(model_path):
            # transformers 4.x utils/hub.py (cached_files), reached through verl's hf_tokenizer
            raise OSError("Incorrect path_or_model_id: '%s'. Please provide either the path to a local folder or "
                          "the repo_id of a model on the Hub." % model_path)
        config_json = os.path.join(model_path, "config.json")
        if not os.path.isfile(config_json):
            # transformers 4.x configuration_utils.py, for a local directory without config.json
            raise OSError("%s does not appear to have a file named config.json." % model_path)
        with open(config_json) as fh:
            model_config = json.load(fh)
        for key in ("train_files", "val_files"):
            for path in _files(config["data"][key]):
                if not os.path.exists(path):
                    # datasets' data_files.py (resolve_pattern), reached through verl's RLHFDataset
                    raise FileNotFoundError("Unable to find '%s'" % path)
        if "wandb" in _files(config["trainer"]["logger"]):
            _wandb_api_key()  # verl's Tracking calls wandb.init in the TaskRunner (verl/utils/tracking.py)
        logger = None
        if "file" in config["trainer"]["logger"]:
            # verl v0.7.0 verl/utils/tracking.py FileLogger: no makedirs when VERL_FILE_LOGGER_PATH is set
            path = os.environ.get("VERL_FILE_LOGGER_PATH")
            if path is None:
                directory = os.path.join(os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", ".")),
                                         config["trainer"]["project_name"])
                os.makedirs(directory, exist_ok=True)
                path = os.path.join(directory, config["trainer"]["experiment_name"] + ".jsonl")
            logger = open(path, "w")
        rollout = config["actor_rollout_ref"]["rollout"]
        if rollout["name"] == "vllm":
            from vllm_ascend.worker.worker_v1 import NPUWorker

            NPUWorker(enable_sleep_mode=rollout.get("enable_sleep_mode", True),
                      enforce_eager=rollout.get("enforce_eager", False)).load_model()
        metrics = {"dapo_ops/dry_mode": 1, "dapo_ops/model_layers": model_config.get("num_hidden_layers"),
                   "dapo_ops/nnodes": config["trainer"]["nnodes"],
                   "dapo_ops/n_gpus_per_node": config["trainer"]["n_gpus_per_node"]}
        _log(0, metrics, logger)
        ends = time.monotonic() + float(os.environ.get("DAPO_SIM_TRAIN_SECONDS") or 0)  # the sim's training time
        for step in range(1, 1 << 30):
            started = time.monotonic()
            if started >= ends:
                break
            time.sleep(2)
            # the keys verl's DAPO trainer logs for every step that the stand-in can measure: the step's wall time
            # (recipe/dapo/dapo_ray_trainer.py, marked_timer("step")) and the step counters
            _log(step, {"training/global_step": step, "training/epoch": 0,
                        "timing_s/step": time.monotonic() - started, "dapo_ops/dry_mode": 1}, logger)
        if logger is not None:
            logger.close()
        return {"nnodes": config["trainer"]["nnodes"], "npus": config["trainer"]["n_gpus_per_node"],
                "batch": config["data"]["train_batch_size"], "host": socket.gethostname()}


if __name__ == "__main__":
    sys.exit(main())
'''
