"""The report as one self-contained HTML page: the tables, and the plots embedded as base64 data: URIs (no file
beside it, nothing fetched)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from dapo_ops.report.table import comparison_rows, rows

STYLE = """body{font-family:sans-serif;margin:2em;max-width:64em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f3f3f3}img{display:block;margin:1em 0;border:1px solid #ddd}.note{color:#666}"""


def _table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><tr>{head}</tr>{lines}</table>"


def _image(name: str, path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'


def page(title: str, summary: dict, plots: dict[str, Path], comparison: dict | None = None) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class=\"note\">from {html.escape(', '.join(summary['sources']))}</p>",
             _table(("figure", "value", "detail"), rows(summary))]
    if comparison:
        parts += [f"<h2>against {html.escape(comparison['baseline'])}</h2>",
                  _table(("figure", "run", comparison["baseline"], "run / baseline"), comparison_rows(comparison))]
    parts.append("<h2>plots</h2>")
    for name, path in plots.items():
        if name != "hardware":
            parts.append(_image(name, path))
        if name == "step_time" and "hardware" in plots:   # the hardware under the step times
            parts += _hardware(summary["hardware"], plots["hardware"])
    parts.append("</body></html>\n")
    return "".join(parts)


def _hardware(hardware: dict, plot: Path) -> list[str]:
    """Under the step-time plot: the nodes' temperature and AICore over time, then the slow steps and the alerts
    raised while each ran."""
    margin = f"{hardware['slow_margin']:.0%}"
    parts = ["<h2>hardware</h2>",
             f"<p class=\"note\">{hardware['samples']} samples of {html.escape(', '.join(hardware['nodes']))} "
             "(top RUN, watch)</p>", _image("hardware", plot)]
    if not hardware["steps_placed"]:
        parts.append("<p class=\"note\">no sample saw a step of the run (watch records none; top RUN does): "
                     "the steps could not be placed in time</p>")
    elif hardware["slow_steps"]:
        body = [(str(s["step"]), f"{s['seconds']:.1f} s", f"{s['ratio']:.2f}×",
                 "; ".join(f"{a['severity']}: {a['message']}" for a in s["alerts"]) or "none sampled")
                for s in hardware["slow_steps"]]
        parts += [f"<p>steps slower than the median ({hardware['median_step_s']:.1f} s) by more than {margin}</p>",
                  _table(("step", "time", "× median", "alerts while it ran"), body)]
    else:
        parts.append(f"<p class=\"note\">no step slower than the median by more than {margin}</p>")
    return parts
