"""The simulated fleet's stand-in for verl's DAPO entry point (recipe/dapo/main_dapo.py), served in the sim's verl
repository (dapo_sim/repos.py)."""

from dapo_ops.job.validate import PROJECT_RECIPE

DAPO_TRAINER_YAML = (PROJECT_RECIPE / "dapo_trainer.yaml").read_text()

MAIN_DAPO = '''"""DAPO entry point stand-in (dapo-ops simulated fleet), shaped like verl v0.7.0 recipe/dapo/main_dapo.py.

torch_npu is a stand-in on the simulated fleet, so no training runs. What the real entry point does before the
first training step, and what the product depends on, happens for real:
- `main` composes the job's Hydra configuration and starts a `TaskRunner` Ray actor (num_cpus=1). Ray may place it
  on any node (upstream: "please make sure main_task is not scheduled on head"); the stand-in puts it on a node
  other than the driver's whenever there is one (DAPO_SIM_TASKRUNNER_NODE=<hostname> picks one), so a job that
  only works on the head fails here as it would on a real cluster.
- `TaskRunner.run` (verl/trainer/main_ppo.py TaskRunner.run) reads the model and the data on the node it runs
  on, with the real libraries and verl's calls (`load_data` below, which runs without Ray too): the tokenizer
  (transformers' AutoTokenizer, via verl's hf_tokenizer), the model's config (AutoConfig, as verl's workers do), the
  training and validation files (datasets.load_dataset + concatenate_datasets, via verl's RLHFDataset) and the
  overlong-prompt filter when data.filter_overlong_prompts asks for it; the errors are those libraries' own;
- the checkpoint as transformers' from_pretrained finds it: model.safetensors.index.json and each shard's header
  through the real safetensors library (the count is `dapo_ops/weight_tensors` in step 0; no tensor is loaded);
- with `wandb` among the loggers, wandb's own key lookup (WANDB_API_KEY, else the netrc file) as wandb.init does;
- it opens verl's file logger like verl/utils/tracking.py FileLogger: VERL_FILE_LOGGER_PATH with "w", no
  directory created;
- it starts the vLLM rollout worker's model loading as vllm-ascend does (v0.11.0rc1 vllm_ascend/worker/worker_v1.py
  load_model: sleep mode takes CaMemAllocator), so PYTORCH_NPU_ALLOC_CONF=expandable_segments:True fails with
  vllm-ascend's own assertion.
Then it logs step 0 (the dry mode's `dapo_ops/*` facts, with the rows read and the overlong prompts counted) as
verl's console and file loggers do and exits 0 (the documented dry mode), after "training" for
DAPO_SIM_TRAIN_SECONDS (default 0) in the TaskRunner: a 2 s sleep per step (every NPU node's load marker set busy
for it: recipe/dapo/sim_npu_load.py), each logged with its measured
`timing_s/step` (for `report --follow` and tests of a node lost in training), saving and resuming checkpoints as
verl does on disk (recipe/dapo/sim_checkpoints.py: trainer.save_freq, max_actor_ckpt_to_keep, resume_mode).
"""
import json
import math
import numbers
import os
import pprint
import socket
import sys
import time
import traceback

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


def _log(step, data, logger):
    """What verl's Tracking does with a step's metrics for the console and file loggers: the console line of
    verl/utils/logger/aggregate_logger.py concat_dict_to_str (numbers only, pprint-formatted), and a JSON line of
    verl/utils/tracking.py FileLogger.log (buffered, no flush: the file fills when the logger closes)."""
    values = ["%s:%s" % (k, pprint.pformat(v)) for k, v in data.items() if isinstance(v, numbers.Number)]
    print(" - ".join(["step:%d" % step] + values), flush=True)
    if logger is not None:
        logger.write(json.dumps({"step": step, "data": data}) + "\\n")


def _wandb_api_key():
    """wandb 0.23.1's key lookup when wandb.init logs in without a terminal (wandb/sdk/wandb_login.py _login): the
    settings' api_key (WANDB_API_KEY), else wandb.sdk.lib.auth.read_netrc_auth(host=settings.base_url) (the netrc
    file at $NETRC, else ~/.netrc, for the host of WANDB_BASE_URL, default https://api.wandb.ai; a key of the wrong
    form raises wandb's AuthenticationError there), else the prompt, which without a terminal raises UsageError."""
    from wandb.errors import UsageError
    from wandb.sdk.lib import auth

    key = os.environ.get("WANDB_API_KEY") or auth.read_netrc_auth(
        host=os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    if not key:
        # wandb/sdk/wandb_login.py _WandbLogin.prompt_api_key, on term.NotATerminalError
        raise UsageError("No API key configured. Use `wandb login` to log in.")
    return key


def _files(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _without_torch():
    """torch is a stand-in on the simulated fleet (version metadata, no tensors): transformers and datasets would
    import it and fail. USE_TORCH=0, their own switch, keeps them to what the stand-in asks of them (tokenizers,
    configurations, data files); on a real node they run with torch as verl imports them."""
    os.environ["USE_TORCH"] = "0"


def hf_tokenizer(name_or_path, **kwargs):
    """verl v0.7.0 verl/utils/tokenizer.py hf_tokenizer: transformers' AutoTokenizer, then set_pad_token_id (the
    eos token pads when the tokenizer names no pad token)."""
    _without_torch()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def rl_dataset(data_files, config, tokenizer, max_samples=-1):
    """verl v0.7.0 verl/utils/dataset/rl_dataset.py RLHFDataset (without a processor or tools): the settings it reads
    in __init__ (:105-133), _read_files_and_tokenize (:153-179) and maybe_filter_out_long_prompts (:181-261).
    Returns the dataset and its counts: `rows` read ("dataset len"), `overlong` prompts longer than
    max_prompt_length tokens with the chat template applied (counted whatever the configuration says, for the dry
    run's report; verl counts nothing when it does not filter) and `filtered`, the rows the filter dropped (0 unless
    data.filter_overlong_prompts)."""
    _without_torch()
    import datasets

    prompt_key = config.get("prompt_key", "prompt")
    max_prompt_length = config.get("max_prompt_length", 1024)
    filter_overlong_prompts = config.get("filter_overlong_prompts", True)
    apply_chat_template_kwargs = config.get("apply_chat_template_kwargs", {})
    num_workers = config.get("filter_overlong_prompts_workers", max(1, os.cpu_count() // 4))
    num_workers = min(num_workers, os.cpu_count()) if num_workers is not None else None

    dataframes = []
    for parquet_file in _files(data_files):  # rl_dataset.py:155-163
        if parquet_file.endswith(".parquet"):
            dataframe = datasets.load_dataset("parquet", data_files=parquet_file)["train"]
        elif parquet_file.endswith(".json"):
            dataframe = datasets.load_dataset("json", data_files=parquet_file)["train"]
        else:
            raise ValueError(f"Unsupported file format: {parquet_file}")
        dataframes.append(dataframe)
    dataframe = datasets.concatenate_datasets(dataframes)  # :164
    total = len(dataframe)
    print(f"dataset len: {len(dataframe)}", flush=True)  # :167

    if max_samples > 0 and max_samples < total:  # :169-177
        import numpy as np

        if config.get("shuffle", False):
            seed = config.get("seed")
            rng = np.random.default_rng(*((seed,) if seed is not None else ()))
            indices = rng.choice(total, size=max_samples, replace=False)
        else:
            indices = np.arange(max_samples)
        dataframe = dataframe.select(indices.tolist())
        print(f"selected {max_samples} random samples out of {total}", flush=True)

    def doc2len(doc) -> int:  # :240-252, a tokenizer without a processor
        try:
            apply_kwargs = dict(**apply_chat_template_kwargs)
            return len(tokenizer.apply_chat_template(doc[prompt_key], add_generation_prompt=True, **apply_kwargs))
        except Exception:
            print("Error processing one of the samples, skipping...")
            traceback.print_exc()
            return max_prompt_length + 1

    rows = len(dataframe)
    if filter_overlong_prompts:
        dataframe = dataframe.filter(  # :254-258
            lambda doc: doc2len(doc) <= max_prompt_length,
            num_proc=num_workers,
            desc=f"Filtering prompts longer than {max_prompt_length} tokens",
        )
        print(f"filter dataset len: {len(dataframe)}", flush=True)  # :260
        overlong = filtered = rows - len(dataframe)
    else:
        overlong, filtered = sum(1 for doc in dataframe if doc2len(doc) > max_prompt_length), 0
    return dataframe, {"rows": total, "overlong": overlong, "filtered": filtered}


def weight_tensors(model_path):
    """The tensors the checkpoint holds, read as transformers' from_pretrained reads a sharded checkpoint (the index's
    weight_map, then each shard's header through the real safetensors library): torch is a stand-in here, so no
    tensor is loaded into a model."""
    from safetensors import safe_open

    with open(os.path.join(model_path, "model.safetensors.index.json")) as fh:
        shards = sorted(set(json.load(fh)["weight_map"].values()))
    count = 0
    for shard in shards:
        with safe_open(os.path.join(model_path, shard), framework="np") as weights:
            count += len(list(weights.keys()))
    return count


def load_data(config):
    """What verl v0.7.0 verl/trainer/main_ppo.py TaskRunner.run reads before the trainer exists, on this node: the
    tokenizer (:307-308, hf_tokenizer with data.trust_remote_code), the model's config (AutoConfig, which verl's
    workers load: verl/workers/fsdp_workers.py _build_model_optimizer) and the datasets (:325-340,
    create_rl_dataset with data.train_max_samples / data.val_max_samples). Plain Python: no Ray needed."""
    model_path = config["actor_rollout_ref"]["model"]["path"]
    data = config["data"]
    trust_remote_code = data.get("trust_remote_code", False)
    tokenizer = hf_tokenizer(model_path, trust_remote_code=trust_remote_code)
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    tensors = weight_tensors(model_path)
    train, train_counts = rl_dataset(data["train_files"], data, tokenizer, data.get("train_max_samples", -1))
    val, val_counts = rl_dataset(data["val_files"], data, tokenizer, data.get("val_max_samples", -1))
    for name, counts in (("training", train_counts), ("validation", val_counts)):
        if counts["overlong"]:
            print("dapo-ops dry mode: %d of %d %s prompts are longer than data.max_prompt_length=%s tokens "
                  "(data.filter_overlong_prompts=%s, data.truncation=%s)"
                  % (counts["overlong"], counts["rows"], name, data.get("max_prompt_length"),
                     data.get("filter_overlong_prompts"), data.get("truncation")), flush=True)
    metrics = {"dapo_ops/weight_tensors": tensors}
    for split, counts in (("train", train_counts), ("val", val_counts)):
        metrics.update({"dapo_ops/%s_rows" % split: counts["rows"],
                        "dapo_ops/%s_rows_overlong" % split: counts["overlong"],
                        "dapo_ops/%s_rows_filtered" % split: counts["filtered"]})
    return {"tokenizer": tokenizer, "model_config": model_config, "train": train, "val": val, "metrics": metrics}


@ray.remote(num_cpus=1)
class TaskRunner:
    def run(self, config):
        print("TaskRunner hostname: %s, PID: %s" % (socket.gethostname(), os.getpid()), flush=True)
        data = load_data(config)
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
        metrics = {"dapo_ops/dry_mode": 1, "dapo_ops/model_layers": data["model_config"].num_hidden_layers,
                   "dapo_ops/nnodes": config["trainer"]["nnodes"],
                   "dapo_ops/n_gpus_per_node": config["trainer"]["n_gpus_per_node"], **data["metrics"]}
        from recipe.dapo.sim_checkpoints import Checkpoints

        checkpoints = Checkpoints(config)
        resumed = checkpoints.load()  # recipe/dapo/dapo_ray_trainer.py fit: _load_checkpoint before anything
        _log(resumed, metrics, logger)
        count = math.ceil(float(os.environ.get("DAPO_SIM_TRAIN_SECONDS") or 0) / 2)  # the sim's training time
        from recipe.dapo.sim_npu_load import mark_busy, npu_nodes

        nodes, since = npu_nodes(), time.time()
        for step in range(resumed + 1, resumed + count + 1):
            started = time.monotonic()
            mark_busy(nodes, since, time.time() + 3)
            time.sleep(2)
            # the keys verl's DAPO trainer logs for every step that the stand-in can measure: the step's wall time
            # (recipe/dapo/dapo_ray_trainer.py, marked_timer("step")) and the step counters
            values = {"training/global_step": step, "training/epoch": 0,
                      "timing_s/step": time.monotonic() - started, "dapo_ops/dry_mode": 1}
            if checkpoints.saves_at(step, step == resumed + count):
                saving = time.monotonic()
                checkpoints.save(step)
                values["timing_s/save_checkpoint"] = time.monotonic() - saving
            _log(step, values, logger)
        if count:
            mark_busy(nodes, since, time.time())
        if logger is not None:
            logger.close()
        return {"nnodes": config["trainer"]["nnodes"], "npus": config["trainer"]["n_gpus_per_node"],
                "batch": config["data"]["train_batch_size"], "host": socket.gethostname()}


if __name__ == "__main__":
    sys.exit(main())
'''
