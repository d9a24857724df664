"""The report's PNG plots, drawn headless: matplotlib's Agg canvas on a bare Figure (no pyplot, no display, no
global state). Every plot is written, 800 × 450 px; one whose metrics were not logged says so on its canvas."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dapo_ops.report.steps import STEP_TIME, RunMetrics
from dapo_ops.report.summary import SPLIT, TOKENS, VALIDATION_PREFIX, other_time, training_steps

SIZE_INCHES, DPI = (8.0, 4.5), 100          # 800 × 450 px
PLOTS = ("score", "response_length", "step_time", "tokens_per_s")
MAX_BARS = 60                               # more steps than this are drawn as a stacked area


def _figure(title: str):
    figure = Figure(figsize=SIZE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    return figure, axes


def _points(steps: list[tuple[int, dict[str, float]]], key: str) -> tuple[list[int], list[float]]:
    pairs = [(step, m[key]) for step, m in steps if key in m]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _not_logged(axes, keys: str) -> None:
    axes.text(0.5, 0.5, f"not logged: {keys}", ha="center", va="center", transform=axes.transAxes, color="grey")


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, format="png", dpi=DPI)
    return path


def score_plot(run: RunMetrics, path: Path) -> Path:
    figure, axes = _figure("score and validation")
    x, y = _points(training_steps(run), "critic/score/mean")
    if x:
        axes.plot(x, y, label="critic/score/mean")
    all_steps = run.ordered()
    val_keys = sorted({k for _, m in all_steps for k in m if k.startswith(VALIDATION_PREFIX)})
    for key in val_keys:
        vx, vy = _points(all_steps, key)
        axes.plot(vx, vy, marker="o", linestyle="--", label=key)
    if x or val_keys:
        axes.legend(fontsize="small", loc="best")
    else:
        _not_logged(axes, f"critic/score/mean, {VALIDATION_PREFIX}*")
    return _save(figure, path)


def response_length_plot(run: RunMetrics, path: Path) -> Path:
    figure, axes = _figure("response length")
    steps = training_steps(run)
    x, y = _points(steps, "response_length/mean")
    cx, cy = _points(steps, "response_length/clip_ratio")
    if x:
        axes.plot(x, y, label="mean (tokens)")
        axes.set_ylabel("tokens")
        mx, my = _points(steps, "response_length/max")
        if mx:
            axes.plot(mx, my, label="max (tokens)", alpha=0.6)
        axes.legend(fontsize="small", loc="upper left")
    if cx:
        clip = axes.twinx()
        clip.plot(cx, cy, color="tab:red", linestyle=":", label="clip ratio")
        clip.set_ylabel("clip ratio")
        clip.legend(fontsize="small", loc="upper right")
    if not x and not cx:
        _not_logged(axes, "response_length/mean, response_length/clip_ratio")
    return _save(figure, path)


def step_time_plot(run: RunMetrics, path: Path) -> Path:
    figure, axes = _figure("step time split")
    steps = training_steps(run)
    parts = [p for p in SPLIT if any(f"timing_s/{p}" in m for _, m in steps)]
    x = [step for step, _ in steps]
    layers = [[m.get(f"timing_s/{p}", 0.0) for _, m in steps] for p in parts] + [[other_time(m) for _, m in steps]]
    labels = [*parts, "other"]
    if not steps:
        _not_logged(axes, STEP_TIME)
    elif len(steps) <= MAX_BARS:
        bottom = [0.0] * len(steps)
        for layer, label in zip(layers, labels):
            axes.bar(x, layer, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, layer)]
    else:
        axes.stackplot(x, *layers, labels=labels)
    if steps:
        axes.set_ylabel("seconds")
        axes.legend(fontsize="small", loc="upper left")
    return _save(figure, path)


def tokens_plot(run: RunMetrics, path: Path, baseline: dict | None = None) -> Path:
    figure, axes = _figure("tokens/s (all NPUs)")
    steps = [(s, m) for s, m in training_steps(run) if TOKENS in m and m[STEP_TIME] > 0]
    if steps:
        axes.plot([s for s, _ in steps], [m[TOKENS] / m[STEP_TIME] for _, m in steps], label="run")
        axes.set_ylabel("tokens/s")
        if baseline and baseline.get("tokens_per_s"):
            axes.axhline(baseline["tokens_per_s"], color="grey", linestyle="--", label=baseline["name"])
        axes.legend(fontsize="small", loc="best")
    else:
        _not_logged(axes, f"{TOKENS}, {STEP_TIME}")
    return _save(figure, path)


def draw_all(run: RunMetrics, directory: Path, baseline: dict | None = None) -> dict[str, Path]:
    return {"score": score_plot(run, directory / "score.png"),
            "response_length": response_length_plot(run, directory / "response_length.png"),
            "step_time": step_time_plot(run, directory / "step_time.png"),
            "tokens_per_s": tokens_plot(run, directory / "tokens_per_s.png", baseline)}


def hardware_plot(seen: list, hardware: dict, path: Path) -> Path:
    """Per node, its hottest NPU's temperature and its NPUs' mean AICore % over the run's sampled time, the slow
    steps shaded (when the samples placed the steps)."""
    figure = Figure(figsize=(SIZE_INCHES[0], SIZE_INCHES[1] * 1.4), dpi=DPI)
    FigureCanvasAgg(figure)
    temp_axes, busy_axes = figure.subplots(2, 1, sharex=True)
    origin = seen[0].at
    for axes, field, label in ((temp_axes, "hottest", "hottest NPU (C)"), (busy_axes, "busy", "mean AICore (%)")):
        for node in hardware["nodes"]:
            pairs = [((p.at - origin) / 60, getattr(p, field)[node]) for p in seen if node in getattr(p, field)]
            axes.plot([x for x, _ in pairs], [y for _, y in pairs], label=node)
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
        for slow in hardware["slow_steps"]:
            axes.axvspan((slow["start"] - origin) / 60, (slow["end"] - origin) / 60, color="tab:red", alpha=0.15)
    temp_axes.set_title("hardware by node" + ("; slow steps shaded" if hardware["slow_steps"] else "")
                        + ("" if hardware["steps_placed"] else " (no sample saw a step: steps not placed)"))
    temp_axes.legend(fontsize="small", loc="upper left", ncol=4)
    busy_axes.set_xlabel("minutes since the first sample")
    return _save(figure, path)
