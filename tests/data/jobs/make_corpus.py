"""Write the job-spec corpus the tests run `dapo-ops validate` on: broken, hostile and real-world specs, each
with its expected exit code and a piece of its one-line message (cases.yml).

Most cases are the seed job (jobs/qwen3-30b-a3b-dapo.yaml) with one change; the raw ones are files no YAML
writer would produce. Regenerate after changing a case: .venv/bin/python tests/data/jobs/make_corpus.py
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

HERE = Path(__file__).parent
SEED = HERE.parents[2] / "jobs" / "qwen3-30b-a3b-dapo.yaml"
DELETE = object()

# name -> (changes {dotted.path: value}, exit code, piece of the message; "" for a clean exit 0)
CHANGED = {
    # real-world specs that must validate
    "seed": ({}, 0, ""),
    "list-of-train-files": ({"data.train_files": ["/data/dapo/a.parquet", "/data/dapo/b.parquet"]}, 0, ""),
    "pinned-npus-matching": ({"cluster.npus_per_node": 16}, 0, ""),
    "hostile-prompt-key-is-data": ({"data.prompt_key": "$(touch /tmp/pwned)"}, 0, ""),
    "quotes-in-a-path-are-data": ({"model.path": "/data/it's \"here\"; rm -rf ~"}, 0, ""),
    "quoted-hostile-override-value-is-data": ({"extra_overrides": ["trainer.default_local_dir='/ckpt/$(touch x)'"]},
                                              0, ""),
    "unquoted-shell-in-an-override": ({"extra_overrides": ["trainer.default_local_dir=/ckpt/$(touch x)"]}, 2,
                                      "extra_overrides[0]: 'trainer.default_local_dir=/ckpt/$(touch x)' is not a Hydra"),
    "wandb-and-console": ({"trainer.loggers": ["console", "wandb"]}, 2,
                          "trainer.loggers has wandb, which needs WANDB_API_KEY: list it under secrets"),
    "wandb-key-not-set": ({"trainer.loggers": ["console", "wandb"], "secrets": ["WANDB_API_KEY"]}, 2,
                          "secrets lists WANDB_API_KEY, which is not set in the environment"),
    "unknown-secret": ({"secrets": ["OPENAI_API_KEY"]}, 2,
                       "secrets: 'OPENAI_API_KEY' is not a secret dapo-ops hands to a job (WANDB_API_KEY, HF_TOKEN)"),
    "more-responses": ({"algorithm.n_responses": 8}, 0, ""),
    "eager-rollout-with-its-queue": ({"rollout.enforce_eager": True, "env.task_queue_enable": 2}, 0, ""),
    # names and free text
    "name-with-brackets": ({"name": "[/x]"}, 2, "name: '[/x]' must be letters"),
    "name-with-trailing-newline": ({"name": "dapo\n"}, 2, "name: contains the control character '\\n'"),
    "name-too-long": ({"name": "x" * 65}, 2, "must be letters, digits"),
    "experiment-name-with-space": ({"trainer.experiment_name": "my run"}, 2, "trainer.experiment_name: 'my run'"),
    "escape-sequence-in-path": ({"model.path": "/data/\x1b[31mred"}, 2, "model.path: contains the control character"),
    "nul-in-prompt-key": ({"data.prompt_key": "p\x00"}, 2, "data.prompt_key: contains the control character"),
    "interpolation-in-path": ({"trainer.log_dir": "/logs/${oc.env:WANDB_API_KEY}"}, 2,
                              "trainer.log_dir: contains '${', an OmegaConf interpolation"),
    "interpolation-in-override": ({"extra_overrides": ["trainer.default_local_dir=${oc.env:HOME}"]}, 2,
                                  "extra_overrides[0]: contains '${'"),
    "relative-model-path": ({"model.path": "models/qwen"}, 2, "model.path: 'models/qwen' must be an absolute path"),
    "relative-file-in-a-list": ({"data.val_files": ["/data/a.parquet", "b.parquet"]}, 2,
                                "data.val_files: 'b.parquet' must be an absolute path"),
    # secrets
    "wandb-key-in-env-extra": ({"env.extra": {"WANDB_API_KEY": "sk-123"}}, 2,
                               "env.extra.WANDB_API_KEY: looks like a secret"),
    "hf-token-in-env-extra": ({"env.extra": {"HF_TOKEN": "hf_abc"}}, 2, "env.extra.HF_TOKEN: looks like a secret"),
    "lowercase-env-name": ({"env.extra": {"hccl_buffsize": "200"}}, 2, "not an environment variable name"),
    "hostile-env-name": ({"env.extra": {"X;touch /tmp/p": "1"}}, 2, "not an environment variable name"),
    "env-name-with-newline": ({"env.extra": {"HCCL_X\n": "1"}}, 2, "not an environment variable name"),
    # shape and types
    "unknown-top-level-field": ({"clster": {"nodes": 2}}, 2, "clster: unknown field"),
    "unknown-nested-field": ({"actor.ulysses_sp": 8}, 2, "actor.ulysses_sp: unknown field"),
    "missing-model-path": ({"model.path": DELETE}, 2, "model.path: required field is missing"),
    "missing-data": ({"data": DELETE}, 2, "data: required field is missing"),
    "batch-as-text": ({"data.train_batch_size": "512x"}, 2, "data.train_batch_size: expected a whole number"),
    "nodes-as-bool": ({"cluster.nodes": True}, 2, "cluster.nodes: expected a whole number"),
    "offload-as-yes": ({"actor.param_offload": "yes"}, 2, "actor.param_offload: expected true or false"),
    "model-as-list": ({"model": ["x"]}, 2, "model: expected a mapping"),
    "overrides-as-string": ({"extra_overrides": "trainer.total_epochs=1"}, 2, "extra_overrides: expected a list"),
    "override-without-equals": ({"extra_overrides": ["trainer.total_epochs"]}, 2, "is not one Hydra override"),
    "env-value-as-mapping": ({"env.extra": {"HCCL_X": {"a": 1}}}, 2, "env.extra.HCCL_X: expected a string"),
    # arithmetic
    "negative-batch": ({"data.train_batch_size": -512}, 2, "data.train_batch_size must be a positive number"),
    "zero-nodes": ({"cluster.nodes": 0}, 2, "cluster.nodes is 0; it must be a positive number"),
    "gen-smaller-than-train": ({"data.gen_batch_size": 256}, 2, "data.gen_batch_size 256 is smaller than"),
    "mini-batch-larger-than-train": ({"algorithm.ppo_mini_batch_size": 1024}, 2, "is larger than data.train_batch_size"),
    "train-not-a-multiple-of-mini": ({"algorithm.ppo_mini_batch_size": 48}, 2, "is not a multiple of"),
    "sp-not-dividing-world": ({"actor.ulysses_sequence_parallel_size": 7}, 2, "does not divide the world size 32"),
    "tp-not-dividing-a-node": ({"rollout.tensor_parallel_size": 3}, 2, "does not divide"),
    "sp-without-remove-padding": ({"model.use_remove_padding": False}, 2, "needs model.use_remove_padding"),
    "too-long-for-the-model": ({"data.max_response_length": 40000}, 2, "exceeds the model's max_position_embeddings"),
    "token-budget-below-a-sequence": ({"actor.max_token_len_per_npu": 1024}, 2, "cannot hold one"),
    "actor-phase-beyond-hbm": ({"actor.max_token_len_per_npu": 200000}, 2, "the actor update phase needs about"),
    "sync-rollout": ({"rollout.mode": "sync"}, 2, "rollout.mode 'sync' was removed"),
    "port-past-65535": ({"cluster.ray_port": 70000}, 2, "cluster.ray_port: 70000 is not a TCP port"),
    "dashboard-port-zero": ({"cluster.dashboard_port": 0}, 2, "cluster.dashboard_port: 0 is not a TCP port"),
    "dashboard-on-the-gcs-port": ({"cluster.dashboard_port": 6379}, 2, "cluster.dashboard_port: 6379 is also"),
    # inventory
    "three-nodes-of-two": ({"cluster.nodes": 3}, 2, "the job needs 3 node(s) but the inventory has 2"),
    "head-not-in-inventory": ({"cluster.head": "node9"}, 2, "cluster.head: 'node9' is not in the inventory"),
    "pinned-npus-disagree": ({"cluster.npus_per_node": 8}, 2, "inventory declares dapo_npus_per_node 16"),
    # verl's configuration
    "misspelled-override-key": ({"extra_overrides": ["actor_rollout_ref.actor.ppo_micro_batch_size_per_npu=1"]}, 2,
                                "did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'"),
    "reward-key-of-a-newer-verl": ({"extra_overrides": ["reward.reward_kwargs.overlong_buffer_cfg.len=4096"]}, 2,
                                   "verl moved it: the pinned verl has 'reward_model.overlong_buffer.len'"),
    "key-under-another-parent": ({"extra_overrides": ["algorithm.max_num_gen_batches=10"]}, 2,
                                 "did you mean 'algorithm.filter_groups.max_num_gen_batches'? (a key of that name"),
    "unlisted-plus-key": ({"extra_overrides": ["+trainer.surprise=1"]}, 2, "adds a key verl does not have"),
    "double-plus-key": ({"extra_overrides": ["++trainer.total_epochs=1"]}, 2, "adds a key verl does not have"),
    "eager-behind-the-spec": ({"extra_overrides": ["actor_rollout_ref.rollout.enforce_eager=True"]}, 2,
                              "set rollout.enforce_eager in the spec instead"),
    # the NPU environment
    "expandable-segments-with-sleep-mode": ({"env.pytorch_npu_alloc_conf": "expandable_segments:True"}, 2,
                                            "Expandable segments are not compatible with memory pool"),
    "task-queue-2-in-graph-mode": ({"env.task_queue_enable": 2}, 2, "needs TASK_QUEUE_ENABLE=1"),
    "task-queue-through-env-extra": ({"env.extra": {"TASK_QUEUE_ENABLE": "2"}}, 2,
                                     "env.extra.TASK_QUEUE_ENABLE: set env.task_queue_enable instead"),
}

# raw files: name -> (bytes, exit code, piece of the message)
RAW = {
    "not-yaml-unclosed-list": (b"name: x\ndata:\n  train_files: [/data/a.parquet, ...\n", 2,
                               "not-yaml-unclosed-list.yaml:4:1:"),
    "top-level-list": (b"- name: x\n", 2, "expected a mapping"),
    "empty-file": (b"", 2, "expected a mapping"),
    "tab-indented": (b"name: x\nmodel:\n\tpath: /data/m\n", 2, "tab-indented.yaml:3:1:"),
    "billion-laughs": (b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                       b"e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n", 2, "billion-laughs.yaml:1:4:"),
    "deeply-nested": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", 2, "deeper than"),
    "latin-1": ("name: caf\xe9\n".encode("latin-1"), 2, "not UTF-8"),
    "duplicate-key": (b"name: a\nname: b\n", 2, "duplicate key 'name'"),
    "python-tag": (b"name: !!python/object/apply:os.system [touch /tmp/pwned]\n", 2,
                   "tag !!python/object/apply:os.system: tags are not allowed"),
    "experiment-name-as-number": (SEED.read_bytes().replace(b"experiment_name: qwen3-30b-a3b-dapo",
                                                            b"experiment_name: 2024.10"), 2,
                                  "2024.10 would be read as the number 2024.1"),
    "verl-style-learning-rate": (SEED.read_bytes().replace(b"algorithm:\n", b"algorithm:\n  lr: 1e-6\n"), 0, ""),
}


def apply_change(data: dict, path: str, value) -> None:
    """Set the dotted `path` in `data` to `value` (DELETE removes it); the unit tests mutate specs with it too."""
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value


def main() -> None:
    seed = yaml.safe_load(SEED.read_text())
    cases = []
    for name, (changes, code, message) in CHANGED.items():
        data = copy.deepcopy(seed)
        for path, value in changes.items():
            apply_change(data, path, value)
        (HERE / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=False))
        cases.append({"file": f"{name}.yaml", "exit": code, "message": message})
    for name, (content, code, message) in RAW.items():
        (HERE / f"{name}.yaml").write_bytes(content)
        cases.append({"file": f"{name}.yaml", "exit": code, "message": message})
    header = "# Written by make_corpus.py: `dapo-ops validate FILE -i tests/data/inventory/two-nodes` exits with `exit`\n"
    (HERE / "cases.yml").write_text(header + yaml.safe_dump(cases, sort_keys=False, width=200))
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
