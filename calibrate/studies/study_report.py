"""A study's result on screen and on disk: the cell table, the HTML page, and the published-vs-predicted figure.

``--out DIR`` writes ``study.json`` (the JSON of ``--json``), ``cells.csv`` (one row per cell, pandas) and
``published-vs-predicted.svg`` (the figure docs/studies.md shows); the figure builder is a pure function of the result.
"""

from __future__ import annotations

import html as _html
import json
import math
from pathlib import Path
from typing import Any, Callable

from meshsim.errors import ComponentMissing
from meshsim.outputs import check_file, check_folder, make_folder, write_file, write_file_with

from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_skill_report import skill_html, skill_lines

# how each role is drawn in the figure and coloured in the HTML table
ROLE_MARKERS = {"predicted": "o", "derived": "d", "fit": "x"}
ROLE_COLOURS = {"predicted": "#ffffff", "derived": "#fff3c4", "fit": "#e6e6e6"}


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def _condition(c: Cell) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.condition.items())


def _pct_error(x: float | None) -> str:
    return f"{x * 100:+.0f}%" if x is not None else "-"


def cell_table(result: StudyResult) -> str:
    """The plain-text table: one line per cell, published vs predicted, error, naive forecast and its error, CI,
    role and note; then the counts and the skill against the naive forecast."""
    width = max([len("condition")] + [len(_condition(c)) for c in result.cells]) + 2  # conditions are never cut
    tw = max([len("table")] + [len(c.table) for c in result.cells]) + 2
    lines = [f"study {result.study}: {result.title}", f"source: {result.source}", "",
             f"{'table':<{tw}}{'condition':<{width}}{'metric':<18}{'published':>10}{'predicted':>10}{'error':>8}"
             f"{'naive':>10}{'n.error':>8}  {'95% CI':<20}{'role':<10}note"]
    for c in result.cells:
        ci = f"[{_num(c.ci95[0])}, {_num(c.ci95[1])}]" if c.ci95 else "-"
        lines.append(f"{c.table:<{tw}}{_condition(c):<{width}}{c.metric:<18}{_num(c.published):>10}"
                     f"{_num(c.predicted):>10}{_pct_error(c.error):>8}{_num(c.naive):>10}"
                     f"{_pct_error(c.naive_error):>8}  {ci:<20}{c.role:<10}{c.note}")
    s = result.summary()
    lat = s["median_abs_error_latency"]
    lines += ["", f"{s['predicted']} predicted cells ({s['not_predicted']} not predictable, see notes), "
                  f"{s['fit']} fit cells, {s['derived']} derived cells; median |error| on predicted latency cells: "
                  + (f"{lat * 100:.1f} %" if lat is not None else "-")
                  + (f"; within the published repetitions' spread: {s['within_published_spread']}"
                     if s["within_published_spread"] else "")]
    lines += ["", *skill_lines(s), ""]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def comparison_figure(result: StudyResult) -> Any:
    """Published vs predicted on log axes, one marker per cell, the diagonal and the +-20 % band (matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ComponentMissing(f"the study figure needs matplotlib ({exc.name} missing); "
                               "pip install 'meshsim[study]'") from None
    cells = [c for c in result.cells if c.error is not None and c.published > 0 and c.predicted and c.predicted > 0]
    fig, ax = plt.subplots(figsize=(5.5, 5.0))
    for metric in sorted({c.metric for c in cells}):
        for role, marker in ROLE_MARKERS.items():
            pts = [c for c in cells if c.metric == metric and c.role == role]
            if pts:
                ax.scatter([c.published for c in pts], [c.predicted for c in pts], marker=marker,
                           label=f"{metric} ({role})", alpha=0.8)
    if cells:
        lo = min(min(c.published, c.predicted or c.published) for c in cells) * 0.7
        hi = max(max(c.published, c.predicted or c.published) for c in cells) * 1.4
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="grey", alpha=0.15,
                        label="±20 %")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("published")
    ax.set_ylabel("predicted by meshsim")
    ax.set_title(f"{result.study}: published vs predicted", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def write_html(result: StudyResult, path: Path) -> Path:
    """One self-contained page: the figure (inline SVG), the notes and the cell table."""
    import io

    fig = comparison_figure(result)
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    rows = "".join(
        f"<tr style='background:{ROLE_COLOURS[c.role]}'>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in (
            c.table, _condition(c), c.metric, _num(c.published), _num(c.predicted),
            f"{c.error * 100:+.1f} %" if c.error is not None else "-", _num(c.naive),
            f"{c.naive_error * 100:+.1f} %" if c.naive_error is not None else "-",
            f"[{_num(c.ci95[0])}, {_num(c.ci95[1])}]" if c.ci95 else "-", c.role, c.note)) + "</tr>"
        for c in result.cells)
    notes = "".join(f"<li>{_html.escape(n)}</li>" for n in result.notes)
    page = (f"<!doctype html><meta charset='utf-8'><title>meshsim study {result.study}</title>"
            f"<h1>{_html.escape(result.title)}</h1><p>{_html.escape(result.source)}</p>"
            f"{skill_html(result.summary())}{buf.getvalue()}<ul>{notes}</ul>"
            "<table border=1 cellspacing=0><tr><th>table</th><th>condition</th><th>metric</th><th>published</th>"
            "<th>predicted</th><th>error</th><th>naive</th><th>naive error</th><th>95% CI</th><th>role</th>"
            f"<th>note</th></tr>{rows}</table>"
            f"<pre>{_html.escape(json.dumps(result.summary(), indent=1))}</pre>")
    return write_file(path, page, "html")


def write_out(result: StudyResult, out_dir: Path) -> list[Path]:
    """study.json, cells.csv and published-vs-predicted.svg in ``out_dir`` (created)."""
    make_folder(out_dir, "out")
    figure = comparison_figure(result)
    return [write_file(out_dir / "study.json", json.dumps(result.to_dict(), indent=1) + "\n", "out"),
            write_file_with(out_dir / "cells.csv", "out", lambda tmp: result.frame().to_csv(tmp, index=False)),
            write_file_with(out_dir / "published-vs-predicted.svg", "out",
                            lambda tmp: figure.savefig(tmp, format="svg"))]


def study_run(name: str, settings: Any, show: Callable[[str], None], *, as_json: bool = False,
              html: str | None = None, out: str | None = None, progress: Any = None) -> None:
    """Run study ``name``, ``show`` what ``meshsim study run`` prints, then write the HTML page and the out folder
    (their targets are checked first; one that fails at the end still leaves the table shown)."""
    from meshsim.calibrate.studies.study_catalog import run_study

    if html:
        check_file(html, "html")
    if out:
        check_folder(out, "out")
    result = run_study(name, settings, progress)
    show(json.dumps(result.to_dict(), indent=1) if as_json else cell_table(result))
    if html:
        write_html(result, Path(html))
    if out:
        write_out(result, Path(out))
