"""A study's skill against its naive forecast on screen: lines under the text table, a table in the HTML page, and
the study table's row per study, docs/studies.md (study_skill computes the numbers; this module only renders a
summary's dict)."""

from __future__ import annotations

import html as _html
from typing import Any, Mapping

FAMILIES = ("latency", "other")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def _verdict(beats: bool | None) -> str:
    return {True: "yes", False: "no", None: "no naive"}[beats]


def _rows(skill: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(family, group, its medians) for every group of every family with predicted cells."""
    rows = []
    for family in FAMILIES:
        block = skill.get(family)
        if not block or not block["overall"]["cells"]:
            continue
        rows.append((family, "overall", block["overall"]))
        rows += [(family, name, g) for name, g in block["by_column"].items()]
        rows += [(family, f"mesh={name}", g) for name, g in block["by_mesh"].items()]
    return rows


def _cells(g: Mapping[str, Any]) -> str:
    return str(g["cells"]) if g["naive_cells"] == g["cells"] else f"{g['naive_cells']}/{g['cells']}"


def skill_lines(summary: Mapping[str, Any]) -> list[str]:
    """The text report's skill block: per family, overall, per column and per mesh; then the verdict."""
    skill = summary.get("skill")
    if not skill:
        return ["no naive forecast defined for this study: it does not count as reproduced"]
    rows = _rows(skill)
    width = max([len("group")] + [len(name) for _, name, _ in rows]) + 2
    lines = [f"naive forecast: {skill['naive_forecast']}", skill["definition"],
             "(model: median |error| of the predicted cells that have a naive value; cells n/m: n of the m "
             "predicted cells have one)",
             f"{'':<9}{'group':<{width}}{'cells':>7}{'model':>10}{'naive':>10}{'skill':>8}  beats naive"]
    for family, name, g in rows:
        score = "-" if g["skill"] is None else f"{g['skill']:+.2f}"
        lines.append(f"{family:<9}{name:<{width}}{_cells(g):>7}{_pct(g['model_on_naive_cells']):>10}"
                     f"{_pct(g['naive']):>10}{score:>8}  {_verdict(g['beats_naive'])}")
    lines.append(verdict_sentence(summary))
    return lines


def verdict_sentence(summary: Mapping[str, Any]) -> str:
    yes, no = summary["reproduced_columns"], summary["not_reproduced_columns"]
    return (f"reproduced (beats the naive forecast on its predicted latency cells): "
            f"{'yes' if summary['reproduced'] else 'no'}; columns where it does: {', '.join(yes) or 'none'}; "
            f"where it does not: {', '.join(no) or 'none'}")


def skill_html(summary: Mapping[str, Any]) -> str:
    """The skill block as an HTML table and the verdict as a paragraph."""
    skill = summary.get("skill")
    if not skill:
        return "<p>No naive forecast defined for this study: it does not count as reproduced.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("family", "group", "cells", "model", "naive", "skill", "beats naive"))
    body = "".join(
        "<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in (
            family, name, _cells(g), _pct(g["model_on_naive_cells"]), _pct(g["naive"]),
            "-" if g["skill"] is None else f"{g['skill']:+.2f}", _verdict(g["beats_naive"]))) + "</tr>"
        for family, name, g in _rows(skill))
    return (f"<h2>Skill against the naive forecast</h2><p>Naive forecast: {_html.escape(skill['naive_forecast'])}. "
            f"{_html.escape(skill['definition'])}.</p><table border=1 cellspacing=0><tr>{head}</tr>{body}</table>"
            f"<p><b>{_html.escape(verdict_sentence(summary))}</b></p>")


def _short(column: str) -> str:
    """A column's value without its variable ('rps=450' -> '450'): the table names the variable once."""
    return column.partition("=")[2] or column


def readme_row(study: Mapping[str, Any]) -> str:
    """One study's row of the study table, from its study.json: cells by role, the predicted latency cells'
    medians (model, naive, skill), the same per column, and whether it beats the naive forecast."""
    s = study["summary"]
    skill = s.get("skill") or {}
    lat = skill.get("latency") or {}
    overall = lat.get("overall") or {}
    columns = "; ".join(f"{_short(name)}: {_pct(g['model_on_naive_cells'])} / {_pct(g['naive'])}"
                        for name, g in (lat.get("by_column") or {}).items()) or "-"
    medians = (f"{_pct(overall.get('model_on_naive_cells'))} / {_pct(overall.get('naive'))}"
               + ("" if overall.get("skill") is None else f" ({overall['skill']:+.2f})"))
    if overall.get("naive_cells", 0) < overall.get("cells", 0):
        medians += f"; {overall['naive_cells']} of {overall['cells']} cells have a naive value"
    verdict = ("yes" if s.get("reproduced") else "**no**") + (
        f": not at {', '.join(map(_short, s['not_reproduced_columns']))}" if s.get("not_reproduced_columns") else "")
    return (f"| `{study['study']}` | {skill.get('column', '-')} (fit: {skill.get('fit_column', '-')}) | "
            f"{s['fit']} / {s.get('derived', 0)} / {s['predicted']} | {medians} | {columns} | {verdict} |")


README_HEADER = ("| study | columns (fit column) | cells fit / derived / predicted | predicted latency cells: median "
                 "\\|error\\| model / naive (skill) | per column: model / naive | beats the naive forecast |\n"
                 "|---|---|---|---|---|---|")


def readme_table(studies: list[Mapping[str, Any]]) -> str:
    return "\n".join([README_HEADER, *(readme_row(s) for s in studies)])
