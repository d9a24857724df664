"""Benchmark: `dapo-ops report`'s step-line parser on a generated console log, against `grep -c 'step:'` on the same
file (both read it from the page cache: each is run once to warm it, then timed, best of --repeat).

The log imitates a DAPO run's driver console as `ray job logs` gives it: per training step one step line of ~90
metrics behind the TaskRunner's coloured Ray prefix (numpy 2 scalars), and --noise-kb of other output around it:
vLLM engine stats from 16 engines on two nodes, tqdm redraws joined by carriage returns, Ray and Python warnings.
A real step of the seed's job takes minutes, so a step line is well under 1 % of the bytes; --noise-kb 20 (a step
line in every ~25 kB) shows the cost of the lines themselves: about 0.6 µs per metric, in Python.

Run: .venv/bin/python benchmarks/report_parse.py [--size-mb 1024] [--noise-kb 500] [--keep PATH]
Prints MB/s and the ratio to grep's time (goals: >= 150 MB/s, <= 3x grep).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import tempfile
import time
from pathlib import Path

from dapo_ops.report.steps import RunMetrics, read_log

PREFIX = "\x1b[2m\x1b[36m(TaskRunner pid=4242)\x1b[0m "
WORKER = "\x1b[2m\x1b[33m(WorkerDict pid={pid}, ip=10.0.0.{node})\x1b[0m "


def step_line(step: int, rng: random.Random) -> bytes:
    keys = ([f"actor/{k}" for k in ("entropy", "pg_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "grad_norm",
                                    "lr")]
            + [f"critic/{g}/{s}" for g in ("score", "rewards", "advantages", "returns") for s in ("mean", "max", "min")]
            + [f"{g}/{s}" for g in ("response_length", "prompt_length") for s in ("mean", "max", "min", "clip_ratio")]
            + [f"timing_s/{k}" for k in ("start_profile", "gen", "generate_sequences", "reward", "old_log_prob",
                                         "ref", "adv", "update_actor", "testing", "stop_profile")]
            + [f"timing_per_token_ms/{k}" for k in ("gen", "ref", "adv", "update_actor")]
            + [f"val-core/math_dapo/acc/mean@{n}" for n in (1, 2, 4, 8, 16, 32)]
            + [f"val-aux/math_dapo/{m}/{s}@{n}" for m in ("score", "reward") for s in ("mean", "std")
               for n in (1, 2, 4, 8, 16, 32)]
            + ["perf/mfu/actor", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb",
               "perf/cpu_memory_used_gb", "response/aborted_ratio"])
    parts = [f"step:{step}"] + [f"{k}:np.float64({rng.random() * 100:.17g})" for k in keys]
    step_time = 600 + rng.random() * 600
    parts += [f"timing_s/step:{step_time!r}", f"perf/total_num_tokens:{rng.randrange(5_000_000, 9_000_000)}",
              f"perf/time_per_step:{step_time!r}", f"perf/throughput:{rng.random() * 400!r}",
              f"train/num_gen_batches:{rng.randrange(1, 4)}"]
    return (PREFIX + " - ".join(parts) + "\n").encode()


def noise_block(rng: random.Random, size: int) -> bytes:
    lines = []
    total = 0
    while total < size:
        kind = rng.random()
        if kind < 0.6:
            line = (WORKER.format(pid=rng.randrange(5000, 6000), node=rng.randrange(2, 4)) +
                    f"INFO 12-01 10:{rng.randrange(60):02d}:{rng.randrange(60):02d} [metrics.py:455] Avg prompt "
                    f"throughput: {rng.random() * 1000:.1f} tokens/s, Avg generation throughput: "
                    f"{rng.random() * 5000:.1f} tokens/s, Running: {rng.randrange(128)} reqs, Swapped: 0 reqs, "
                    f"Pending: {rng.randrange(64)} reqs, GPU KV cache usage: {rng.random() * 100:.1f}%, CPU KV "
                    "cache usage: 0.0%.\n")
        elif kind < 0.9:
            bars = [f"Processed prompts: {p}%|{'#' * (p // 10)}{' ' * (10 - p // 10)}| {p * 128 // 100}/128 "
                    f"[00:{p % 60:02d}<01:{(100 - p) % 60:02d}, {rng.random() * 10:.2f}it/s, est. speed input: "
                    f"{rng.random() * 9000:.2f} toks/s, output: {rng.random() * 9000:.2f} toks/s]"
                    for p in range(0, 101, 4)]
            line = WORKER.format(pid=rng.randrange(5000, 6000), node=2) + "\r".join(bars) + "\n"
        else:
            line = ("/usr/local/python3.11/lib/python3.11/site-packages/torch_npu/utils/storage.py:38: UserWarning: "
                    "TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only "
                    "storage class.\n")
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()


def generate(path: Path, size: int, noise: int) -> int:
    """Writes about `size` bytes; returns the number of step lines."""
    rng = random.Random(16)
    blocks = [noise_block(rng, noise) for _ in range(8)]
    written = steps = 0
    with open(path, "wb") as out:
        while written < size:
            steps += 1
            chunk = blocks[steps % len(blocks)] + step_line(steps, rng)
            out.write(chunk)
            written += len(chunk)
    return steps


def best_of(repeat: int, work) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def parse(path: Path) -> RunMetrics:
    run = RunMetrics()
    with open(path, "rb") as stream:
        read_log(stream, str(path), run)
    return run


def grep(path: Path) -> int:
    return int(subprocess.run(["grep", "-c", "step:", str(path)], capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024)
    parser.add_argument("--noise-kb", type=float, default=500, help="other output per training step")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the log here and keep it (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "console.log"
        steps = generate(path, int(args.size_mb * 1e6), int(args.noise_kb * 1e3))
        size_mb = path.stat().st_size / 1e6
        grep(path), parse(path)                                          # the page cache, warm for both
        grep_s, lines = best_of(args.repeat, lambda: grep(path))
        parse_s, run = best_of(args.repeat, lambda: parse(path))
    if len(run.steps) != steps:
        raise SystemExit(f"parsed {len(run.steps)} steps, generated {steps}")
    rate, ratio = size_mb / parse_s, parse_s / grep_s
    print(f"{size_mb:.0f} MB, {steps} step lines ({lines} lines with 'step:')")
    print(f"parser: {parse_s:.2f} s, {rate:.0f} MB/s; grep -c: {grep_s:.2f} s; parser / grep = {ratio:.2f}x")
    print(f"goals: >= 150 MB/s {'met' if rate >= 150 else 'MISSED'}; <= 3x grep {'met' if ratio <= 3 else 'MISSED'}")


if __name__ == "__main__":
    main()
