"""Callbacks: validate the controls, delegate to the sweeper and the pure builders, never raise.

The callbacks are methods of :class:`Callbacks` so tests call them directly as functions; :func:`register` wires
them to the app. A user error (bad number, malformed YAML, a model that rejects the input) becomes a message on the
page; anything unexpected is logged with its traceback on the server and reported on the page in one line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from meshsim.errors import MeshsimError

from . import figures, report
from .capacity_view import CapacityView
from .layout import CONTROL_IDS, table
from .measured import MeasuredSet, matching_runs, validation_rows
from .what_if import UPLOADED, WhatIf, what_if_from_controls
from .sweep import Sweeper, SweepView

log = logging.getLogger(__name__)


def controls_dict(values: Sequence[Any], upload_contents: str | None, upload_filename: str | None) -> dict:
    """The control values (in CONTROL_IDS order) plus the upload, keyed as what_if_from_controls expects."""
    controls = dict(zip(CONTROL_IDS.values(), values))
    controls["upload_contents"] = upload_contents
    controls["upload_filename"] = upload_filename
    return controls


@dataclass
class Callbacks:
    sweeper: Sweeper
    measured: MeasuredSet
    topologies: Sequence[str]
    meshes: Sequence[str]
    budget_s: float = 1.2  # compute time per request; the page polls until the sweep is complete
    capacity: CapacityView | None = None

    def capacity_bars(self, slo_text: str | None, upload_contents: str | None, *rest: Any) -> tuple:
        """The capacity view for the current controls: delegates to CapacityView (a user error is its message)."""
        *values, upload_filename = rest
        try:
            scenario = self.what_if(controls_dict(values, upload_contents, upload_filename))
            if self.capacity is None:
                return no_update, "the capacity view is not part of this app"
            return self.capacity.compute(scenario, self.sweeper.topology(scenario), slo_text or "")
        except MeshsimError as exc:
            return no_update, str(exc)
        except Exception as exc:  # never let a callback raise: log it, say it in one line
            log.exception("capacity view failed")
            return no_update, f"internal error: {type(exc).__name__}: {exc}"

    def what_if(self, controls: dict) -> WhatIf:
        what_if = what_if_from_controls(controls, self.topologies, self.meshes, self.sweeper.features.all)
        self.sweeper.topology(what_if)  # parse an uploaded topology now, so a bad file is reported at once
        return what_if

    def _failure(self, message: str, ticks: int) -> tuple:
        return (no_update,) * 5 + (message, no_update, no_update, "stopped: fix the input above", ticks,
                                   no_update, no_update, no_update)

    def update(self, n_intervals: int | None, pinned: dict | None, upload_contents: str | None, *rest: Any,
               client: str | None = None) -> tuple:
        """Recompute the views for the current controls (or continue the sweep when the tick fired).

        The tick is a ``dcc.Interval`` allowed one more firing (``max_intervals = n + 1``) only while points are
        missing, so at most one continuation request per page is in flight, whatever a point costs.
        """
        *values, upload_filename = rest
        ticks = n_intervals or 0
        try:
            scenario = self.what_if(controls_dict(values, upload_contents, upload_filename))
            try:
                baseline = self.what_if(pinned) if pinned else None
            except MeshsimError:
                baseline = None  # it was valid when pinned; a mesh model removed since then just drops it
            started = time.monotonic()
            view = self.sweeper.advance(scenario, baseline, self.budget_s, client)
            log.debug("update: %d/%d points in %.2f s", view.done, view.total, time.monotonic() - started)
            return self._render(scenario, baseline, view, ticks)
        except MeshsimError as exc:
            return self._failure(str(exc), ticks)
        except Exception as exc:  # a bug must not take the page down; the traceback goes to the server log
            log.exception("update callback failed")
            return self._failure(f"internal error: {type(exc).__name__}: {exc} (details in the server log)", ticks)

    def _render(self, scenario: WhatIf, baseline: WhatIf | None, view: SweepView, ticks: int) -> tuple:
        measured = matching_runs(self.measured.runs, scenario, self.sweeper.features)
        cdf_rate = scenario.cdf_rate
        if baseline is None:
            summary = [html.Li("Pin a scenario as the baseline, then change a control.")]
        else:
            lines = report.what_changed(baseline, view.baseline_cdf, scenario, view.cdf, cdf_rate)
            summary = [html.Li(line) for line in lines]
        rows = report.table_rows(view.curves)
        n_match = sum(len(v) for v in measured.values())
        ids = sorted({r.run_id for runs in measured.values() for r in runs})
        info = (f"{len(self.measured.runs)} measured runs loaded; {n_match} match this scenario"
                + (f": {', '.join(ids)}." if ids else
                   " (matching needs the same topology, mesh, features, LB path and, for fortio, connections)."))
        validation = validation_rows(self.measured.validations)
        validation_view: Any = (
            table(validation, list(validation[0])) if validation
            else "No validation results (validation*.json) in the measurements folders yet."
        )
        progress_text = ("all points computed" if view.complete
                         else f"computing: {view.done} of {view.total} points")
        notes = [*self.sweeper.features.ignored(scenario.meshes, scenario.features, scenario.features_off),
                 *report.scenario_warnings(view.curves)]
        message = "\n".join([*view.errors, *(f"note: {n}" for n in notes)])
        return (
            figures.latency_figure(view.curves, measured), figures.utilization_figure(view.curves),
            figures.cdf_figure(view.cdf, cdf_rate, measured), summary, table(rows, report.COLUMNS),
            message, str(view.done), str(max(view.total, 1)), progress_text, ticks if view.complete else ticks + 1,
            info, validation_view, figures.proxy_views_figure(view.cdf, cdf_rate),
        )

    def pin(self, trigger: str | None, upload_contents: str | None, *rest: Any) -> tuple:
        """Pin the current controls as the baseline of the "what changed" summary (``trigger`` "unpin": unpin)."""
        *values, upload_filename = rest
        if trigger == "unpin":
            return None, "No baseline pinned."
        controls = controls_dict(values, upload_contents, upload_filename)
        try:
            scenario = self.what_if(controls)
        except MeshsimError as exc:
            return no_update, f"Not pinned: {exc}"
        except Exception as exc:  # see update()
            log.exception("pin callback failed")
            return no_update, f"Not pinned: internal error: {type(exc).__name__}: {exc}"
        return controls, f"Baseline: {scenario.topology}, {', '.join(scenario.meshes)}, " \
                         f"{scenario.describe()['features']}, {scenario.lb}-side LB, {scenario.load}."

    def download(self, trigger: str | None, upload_contents: str | None, *rest: Any) -> Any:
        """CSV (or JSON when ``trigger`` is "download-json") of the numbers computed so far; nothing is recomputed."""
        *values, upload_filename = rest
        try:
            scenario = self.what_if(controls_dict(values, upload_contents, upload_filename))
        except MeshsimError:
            return no_update  # the page already shows why
        view = self.sweeper.view(scenario, None)
        if trigger == "download-json":
            return dcc.send_string(report.export_json(scenario, view.curves), "meshsim-whatif.json")
        return dcc.send_string(report.rows_to_csv(report.table_rows(view.curves)), "meshsim-whatif.csv")

    def upload(self, contents: str | None, filename: str | None) -> tuple:
        """Select the uploaded topology once a file arrives."""
        if not contents:
            return no_update, ""
        return UPLOADED, f"uploaded: {filename}"


def register(app: Dash, callbacks: Callbacks) -> None:
    control_states = [State(cid, "value") for cid in CONTROL_IDS]
    control_inputs = [Input(cid, "value") for cid in CONTROL_IDS]
    app.callback(
        Output("latency-graph", "figure"), Output("util-graph", "figure"), Output("cdf-graph", "figure"),
        Output("summary", "children"), Output("table", "children"), Output("message", "children"),
        Output("progress", "value"), Output("progress", "max"), Output("progress-text", "children"),
        Output("tick", "max_intervals"), Output("measured-info", "children"), Output("validation", "children"),
        Output("proxy-graph", "figure"), Input("tick", "n_intervals"), Input("pinned", "data"), Input("upload", "contents"),
        *control_inputs, State("upload", "filename"), State("client", "data"),
    )(lambda *args: callbacks.update(*args[:-1], client=args[-1]))
    app.callback(
        Output("pinned", "data"), Output("pinned-label", "children"),
        Input("pin", "n_clicks"), Input("unpin", "n_clicks"), State("upload", "contents"),
        *control_states, State("upload", "filename"), prevent_initial_call=True,
    )(lambda _pin, _unpin, *rest: callbacks.pin(ctx.triggered_id, *rest))
    app.callback(
        Output("download", "data"),
        Input("download-csv", "n_clicks"), Input("download-json", "n_clicks"), State("upload", "contents"),
        *control_states, State("upload", "filename"), prevent_initial_call=True,
    )(lambda _csv, _json, *rest: callbacks.download(ctx.triggered_id, *rest))
    app.callback(
        Output("capacity-graph", "figure"), Output("capacity-message", "children"),
        Input("capacity-run", "n_clicks"), State("capacity-slo", "value"), State("upload", "contents"),
        *control_states, State("upload", "filename"), prevent_initial_call=True,
    )(lambda _run, *rest: callbacks.capacity_bars(*rest))
    app.callback(
        Output("topology", "value"), Output("upload-name", "children"),
        Input("upload", "contents"), State("upload", "filename"), prevent_initial_call=True,
    )(callbacks.upload)
