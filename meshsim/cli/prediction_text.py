"""Plain-text rendering of a prediction for the terminal."""

from __future__ import annotations

import math
from typing import Any


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


# the JSON names a load by its model's class; the header by the word --load takes
LOAD_WORDS = {"OpenLoad": "open", "FortioLoad": "fortio", "SequentialLoad": "sequential", "Wrk2Load": "wrk2"}


def prediction_table(d: dict[str, Any]) -> str:
    inp = d["inputs"]
    load = inp["load"]
    rate = load.get("rps")
    head = (f"meshsim predict: {inp['topology']['name']} on {inp['mesh']['name']}"
            f" features={','.join(inp['features']) or 'none'} lb={inp['lb']}"
            f" load={LOAD_WORDS.get(load['model'], load['model'])}"
            + (f" rate={rate:g} rps" if rate else "")
            + (f" connections={load['connections']}" if "connections" in load else "")
            + (f" threads={load['threads']}" if "threads" in load else ""))
    lines = [head, f"{d['replications']} replications x {inp['duration_s']:.3g} s simulated"
             f" ({d['requests']} requests measured, seed {inp['seed']}), {d['wall_s']:.1f} s wall"]
    if inp.get("rps_from"):
        lines.append(f"rate from {inp['rps_from']} (no --rps given)")
    if inp.get("fortio_from"):
        lines.append(inp["fortio_from"])
    if d.get("warmup"):
        lines.append(warmup_line(d["warmup"]))
    lines.append("")
    lines.append(f"{'latency':<10}{'ms':>10}   95% CI")
    for key, label in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"),
                       ("mean", "mean")):
        lo, hi = d["latency_ci95_ms"][key]
        lines.append(f"{label:<10}{_f(d['latency_ms'][key]):>10}   [{_f(lo)}, {_f(hi)}]")
    lines.append("")
    lines.append(f"achieved rps     {_f(d['achieved_rps'], 1)}")
    lines.append("")
    lines.append(f"{'component':<28}{'cpu cores':>10}{'utilisation':>13}{'memory MB':>11}{'in flight':>11}")
    for comp in sorted(d["cpu_cores"], key=lambda c: -d["utilization"][c]):
        mem, held = d["memory_mb"].get(comp), d.get("proxy_in_flight", {}).get(comp)
        lines.append(f"{comp:<28}{_f(d['cpu_cores'][comp]):>10}{d['utilization'][comp] * 100:>12.1f}%"
                     f"{_f(mem, 1) if mem is not None else '':>11}{_f(held, 3) if held is not None else '':>11}")
    nodes = sorted((c for c in d["utilization"] if c not in d["cpu_cores"]), key=lambda c: -d["utilization"][c])
    for node in nodes:  # a node's cores, shared by everything placed on it (their CPU is in the rows above)
        lines.append(f"{node:<28}{'':>10}{d['utilization'][node] * 100:>12.1f}%")
    lines.append("")
    sat = d["saturation_rps"]
    lines.append(f"bottleneck       {d['bottleneck']}")
    lines.append(f"saturation rps   {_f(sat, 0) if sat is not None else 'none'}"
                 "   (offered rate at which the bottleneck reaches 100 % or the answers fall behind)")
    wire = d.get("wire_bytes_per_request") or {}
    if wire:
        lines.append(f"bytes per request {wire['request']:.0f} B of requests and {wire['response']:.0f} B of responses "
                     f"between pods (mesh headers included); the entry receives {wire['entry_request']:.0f} B")
    idle = d.get("idle_cores") or {}
    if idle:
        lines.append("idle cpu cores   " + ", ".join(f"{c} {v:.4f}" for c, v in sorted(idle.items()))
                     + "   (with no traffic at all; part of cpu cores)")
    parts = {k: v for k, v in (d.get("time_breakdown_ms") or {}).items() if v > 0}
    if parts:
        total = sum(parts.values())
        lines.append("")
        lines.append("where the time goes (ms per request, summed over the path)")
        width = max(28, *(len(key) + 1 for key in parts))  # the longest mechanism's name sets the column
        for key, value in sorted(parts.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {key:<{width}}{value:>8.3f}   {value / total * 100:5.1f}%")
    lines += proxy_view_lines(d.get("proxy_latency_ms") or {})
    if d["in_flight"]:
        lines.append(f"in flight at end {d['in_flight']:.1f} requests per replication (not in the percentiles)")
    if d.get("timeseries"):
        lines += ["", *timeseries_table(d["timeseries"])]
    for w in d["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


VIEWS_SHOWN = 12  # a large graph has hundreds of views: the slowest are shown, the rest are in --json


def proxy_view_lines(views: dict[str, dict[str, float | None]]) -> list[str]:
    """Each proxy's own view (what its request-duration histogram would show), the slowest p99 first."""
    if not views:
        return []
    width = max(28, *(len(name) + 1 for name in views))
    lines = ["", "what each proxy sees (from its code reading a request to the response leaving it; its own "
             "histogram's span)", f"  {'proxy view':<{width}}{'p50 ms':>8}{'p99 ms':>9}"]
    ranked = sorted(views.items(), key=lambda kv: -(kv[1].get("p99") or 0.0))
    for name, v in ranked[:VIEWS_SHOWN]:
        lines.append(f"  {name:<{width}}{_f(v.get('p50')):>8}{_f(v.get('p99')):>9}")
    if len(ranked) > VIEWS_SHOWN:
        lines.append(f"  ... {len(ranked) - VIEWS_SHOWN} more views in --json (proxy_latency_ms)")
    return lines


def warmup_line(cut: dict[str, Any]) -> str:
    """What the latencies leave out at each replication's start, and by which rule."""
    if cut["method"] == "MSER-5":
        return (f"start-up transient: the first {cut['requests_cut_per_replication']} requests of each replication "
                f"({cut['seconds_cut_per_replication']:.3g} s) cut, found by MSER-5 on the replications' mean latency")
    if cut["method"] == "fixed":
        return f"warm-up: the first {cut['seconds_cut_per_replication']:.3g} s of each replication cut ({cut['why']})"
    return f"warm-up: nothing cut ({cut['why']})"


def timeseries_table(series: dict[str, Any]) -> list[str]:
    """One line per window: offered and achieved rps, p50/p99, and the busiest component's utilisation."""
    lines = [f"time series ({series['window_s']:g} s windows; utilisation of the busiest component)",
             f"{'from s':>8}{'to s':>8}{'offered':>9}{'achieved':>10}{'p50 ms':>9}{'p99 ms':>9}  busiest"]
    for w in series["windows"]:
        util = w["utilization"]
        top = max(util, key=lambda c: util[c] or 0.0) if util else None
        offered = w["offered_rps"]
        lines.append(f"{w['start_s']:>8.4g}{w['end_s']:>8.4g}{_f(offered, 0) if offered is not None else '-':>9}"
                     f"{_f(w['achieved_rps'], 0):>10}{_f(w['p50_ms']):>9}{_f(w['p99_ms']):>9}  "
                     + (f"{top} {util[top] * 100:.0f} %" if top is not None and util[top] is not None else "-"))
    return lines
