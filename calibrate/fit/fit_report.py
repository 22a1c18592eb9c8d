"""Measured vs fitted CDF plots for every fitted component, as PNG (matplotlib, Agg) and HTML (plotly).

For a deconvolved component the plot shows the mode it was fitted to: the measured CDF of that run against the
CDF of baseline convolved with the fitted passes, which is what the likelihood compared.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Callable

import numpy as np

from meshsim.calibrate.fit.observations import Observation
from meshsim.calibrate.fit.decomposition import Decomposition
from meshsim.errors import ComponentMissing
from meshsim.outputs import make_folder, write_file, write_file_with
from meshsim.progress import Progress

Cdf = Callable[[np.ndarray], np.ndarray]


def _curves(obs: Observation, cdf: Cdf) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if obs.raw:
        x = np.sort(obs.samples)
        y = np.arange(1, x.size + 1) / x.size
    else:  # fortio's own reading of a histogram: linear inside each bucket, flat over empty gaps
        cum = np.cumsum(obs.counts) / obs.counts.sum()
        x = np.column_stack([obs.lo, obs.hi]).ravel()
        y = np.column_stack([np.concatenate([[0.0], cum[:-1]]), cum]).ravel()
    top = obs.quantile(0.999) * 1.3
    grid = np.linspace(obs.min * 0.9, top, 600)
    return x * 1e3, y, grid * 1e3, cdf(grid)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def write_report(decomp: Decomposition, folder: Path, report_progress: Progress | None = None) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ComponentMissing(f"the fit report needs matplotlib and plotly ({exc.name} missing); "
                               "install them with: pip install 'meshsim[fit]'") from None
    make_folder(folder, "report")
    panels: list[tuple[str, str, Observation, Cdf]] = []
    assert decomp.baseline_obs is not None
    base = decomp.baseline
    panels.append(("baseline", f"{base.family.name}, KS {base.gof.ks if base.gof else float('nan'):.4f}",
                   decomp.baseline_obs, lambda x: base.family.cdf(base.theta, x, decomp.baseline_obs.min * 0.999)))
    for name, comp in decomp.components.items():
        for i, term in enumerate(comp.terms):
            label = f"{name} [{term.obs.label}]"
            panels.append((label, f"{comp.best.family.name}, KS {comp.gof[i].ks:.4f}", term.obs, comp.model_cdf(i)))
    written: list[Path] = []
    rows = []
    for title, subtitle, obs, cdf in panels:
        mx, my, fx, fy = _curves(obs, cdf)
        stem = _slug(title)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(mx, my, label=f"measured ({obs.label}, n={obs.n})")
        ax.set_xscale("log")
        ax.plot(fx, fy, label="fitted model")
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("CDF")
        ax.set_title(f"{title}\n{subtitle}", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        png = write_file_with(folder / f"{stem}.png", "report", lambda tmp: fig.savefig(tmp, dpi=90))
        plt.close(fig)
        pfig = go.Figure([go.Scatter(x=mx, y=my, mode="lines", name="measured"),
                          go.Scatter(x=fx, y=fy, mode="lines", name="fitted model")])
        pfig.update_layout(title=f"{title}<br><sub>{subtitle}</sub>", xaxis_title="latency (ms)", yaxis_title="CDF",
                           xaxis_type="log")
        page = write_file_with(folder / f"{stem}.html", "report",
                               lambda tmp: pfig.write_html(tmp, include_plotlyjs="cdn", full_html=True))
        written += [png, page]
        rows.append(f"<li>{html.escape(title)} ({html.escape(subtitle)}): "
                    f"<a href='{page.name}'>interactive</a> <img src='{png.name}' width='480'></li>")
        if report_progress:
            report_progress(f"report: {png.name}")
    index = write_file(folder / "index.html", "<html><head><meta charset='utf-8'><title>meshsim fit report</title>"
                       "</head><body><h1>Measured vs fitted CDF</h1><ul>" + "\n".join(rows) + "</ul></body></html>",
                       "report")
    return [index, *written]
