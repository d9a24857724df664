"""The summary as rows of (figure, value, detail): one source for the rich table, the HTML page and the text file."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}{unit}"
    return f"{value:.{digits}g}{unit}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def _metric_rows(summary: dict) -> list[tuple[str, str, str]]:
    rows = []
    labels = {"score": "score (critic/score/mean)", "response_length": "response length (mean)",
              "response_clip_ratio": "response clip ratio", "entropy": "entropy (actor/entropy)",
              "num_gen_batches": "gen batches per step (train/num_gen_batches)"}
    for name, label in labels.items():
        s = summary["metrics"].get(name)
        if s:
            rows.append((label, fmt(s["last"]), f"last; first {fmt(s['first'])}, median {fmt(s['median'])}, "
                                                 f"max {fmt(s['max'])}"))
    return rows


def _validation_rows(summary: dict) -> list[tuple[str, str, str]]:
    rows = []
    for key, score in sorted(summary["validation"]["scores"].items()):
        (first_step, first), (last_step, last), (best_step, best) = score["first"], score["last"], score["best"]
        rows.append((key, fmt(last), f"step {last_step}; first {fmt(first)} (step {first_step}), "
                                     f"best {fmt(best)} (step {best_step})"))
    for label, metrics in sorted(summary["validation"]["dumps"].items()):
        core_first = sorted(metrics.items(), key=lambda item: (not item[0].startswith("val-core/"), item[0]))
        shown = ", ".join(f"{k} {fmt(v)}" for k, v in core_first[:4]) or "none"
        rows.append((f"{label} validation (printed)", str(len(metrics)), shown))
    return rows


def rows(summary: dict) -> list[tuple[str, str, str]]:
    steps, times, tokens, mfu = summary["steps"], summary["step_time_s"], summary["tokens_per_s"], summary["mfu"]
    span = f"steps {steps['first']}–{steps['last']}" if steps["trained"] else "no step has timing_s/step"
    out = [("steps", str(steps["trained"]), f"{span}; {steps['lines']} step lines"
            + (f"; replayed after a resume: {len(steps['replayed'])}" if steps["replayed"] else ""))]
    if times:
        out.append(("step time", fmt(times["median"], " s"), f"median; p90 {fmt(times['p90'], ' s')}, "
                                                              f"mean {fmt(times['mean'], ' s')}"))
    if tokens:
        out.append(("tokens/s", fmt(tokens["overall"]), f"all steps' tokens / their time; median step "
                                                       f"{fmt(tokens['median'])}"))
        out.append(("tokens/s per NPU", fmt(tokens["per_npu"]), f"{tokens['npus'] or '?'} NPUs"))
    if mfu:
        out.append(("MFU (actor update)", pct(mfu["actor_median"]),
                    f"median perf/mfu/actor; {fmt(mfu['actor_tflops_per_npu'])} of {mfu['peak_tflops']:.0f} "
                    "TFLOPS bf16 per NPU"))
    for part, split in summary["time_split"].items():
        out.append((f"time: {part}", fmt(split["median"], " s"), f"{pct(split['share'])} of step time"))
    out += _metric_rows(summary) + _validation_rows(summary)
    if summary["missing"]:
        out.append(("not logged", str(len(summary["missing"])), ", ".join(summary["missing"])))
    return out


def comparison_rows(comparison: dict) -> list[tuple[str, str, str, str]]:
    labels = {"step_time_s": "step time (s, median)", "tokens_per_s": "tokens/s", "tokens_per_s_per_npu":
              "tokens/s per NPU", "npus": "NPUs"}
    return [(labels[key], fmt(f["run"]), fmt(f["baseline"]), "—" if f["ratio"] is None else f"{f['ratio']:.2f}×")
            for key, f in comparison["figures"].items()]


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("figure", "value", "detail"):
        table.add_column(column, overflow="fold")
    for row in rows(summary):
        table.add_row(*(Text(cell) for cell in row))   # metric names are shown literally, never as markup
    return table


def comparison_table(comparison: dict) -> Table:
    table = Table(title=f"against {comparison['baseline']}", title_justify="left")
    for column in ("figure", "run", comparison["baseline"], "run / baseline"):
        table.add_column(column)
    for row in comparison_rows(comparison):
        table.add_row(*row)
    return table


def as_text(summary: dict, comparison: dict | None) -> str:
    width = max(len(r[0]) for r in rows(summary))
    lines = [f"{label:<{width}}  {value:>10}  {detail}" for label, value, detail in rows(summary)]
    if comparison:
        lines += ["", f"against {comparison['baseline']}:"]
        lines += [f"  {label:<24} run {run:>10}  baseline {base:>10}  {ratio}"
                  for label, run, base, ratio in comparison_rows(comparison)]
    return "\n".join(lines) + "\n"
