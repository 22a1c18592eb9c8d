"""``meshsim study``: list the published studies, or re-create one and compare published with predicted cells."""

from __future__ import annotations

import argparse
import json
import sys

from meshsim.outputs import print_result


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("study", help="re-create a published study (the seed documents) and compare its tables "
                                     "with meshsim's predictions",
                       description="Each study re-creates one document's experiment as meshsim scenarios, fits only "
                                   "what the document's protocol allows (its baseline, its lowest-rate column), "
                                   "predicts every other cell and prints published vs predicted.")
    study_sub = p.add_subparsers(dest="study_command", metavar="SUBCOMMAND", parser_class=type(p))
    study_sub.required = True
    ls = study_sub.add_parser("list", help="the studies, with their titles and sources")
    ls.add_argument("--json", action="store_true", help="print a JSON list of {name, title, source}")
    ls.set_defaults(handler=run_list)
    r = study_sub.add_parser("run", help="run one study: fit, predict every other cell, compare")
    r.add_argument("name", metavar="NAME", help="the study's name (see `meshsim study list`)")
    r.add_argument("--json", action="store_true", help="print one JSON object: {study, cells: [...], summary}")
    r.add_argument("--html", metavar="FILE", help="also write an HTML page (figure, notes, cells)")
    r.add_argument("--out", metavar="DIR", help="also write study.json, cells.csv and published-vs-predicted.svg")
    r.add_argument("--short", action="store_true", help="the test suite's settings: 2 short replications per cell "
                   "(same cells, wider confidence intervals)")
    r.add_argument("--seed", type=int, default=1, help="root seed of every prediction (default 1)")
    r.add_argument("--processes", type=int, help="replications run in parallel (default: the cores, up to 8)")
    r.add_argument("--time-limit", type=float, metavar="S", help="wall-clock limit on each cell's replications")
    r.set_defaults(handler=run_one)
    _register_shipped(study_sub)


def run_list(args: argparse.Namespace) -> int:
    from meshsim.calibrate.studies.study_catalog import list_studies

    studies = list_studies()
    print_result(json.dumps(studies, indent=1) if args.json else
                 "\n".join(f"{s['name']:<18}{s['title']}\n{'':<18}source: {s['source']}" for s in studies))
    return 0


def run_one(args: argparse.Namespace) -> int:
    from meshsim.calibrate.studies.study_catalog import StudySettings
    from meshsim.calibrate.studies.study_report import study_run

    settings = StudySettings(short=args.short, seed=args.seed, processes=args.processes,
                             time_limit_s=args.time_limit)
    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    study_run(args.name, settings, print_result, as_json=args.json, html=args.html, out=args.out, progress=progress)
    return 0


def _register_shipped(study_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    g = study_sub.add_parser("regenerate", help="run the studies with full settings, one at a time, write each to "
                             "DIR/NAME (docs/studies is what docs/studies.md shows) and print the study table")
    g.add_argument("out", metavar="DIR", help="the folder of study folders, e.g. docs/studies")
    g.add_argument("--studies", nargs="+", metavar="NAME", help="only these studies (default: all five)")
    g.add_argument("--short", action="store_true", help="the test suite's settings (not for shipping)")
    g.add_argument("--seed", type=int, default=1, help="root seed of every prediction (default 1)")
    g.add_argument("--processes", type=int, help="replications run in parallel (default: the cores, up to 8)")
    g.set_defaults(handler=run_regenerate)
    t = study_sub.add_parser("table", help="print the study table (docs/studies.md) from DIR/NAME/study.json")
    t.add_argument("folder", metavar="DIR", help="the folder of study folders, e.g. docs/studies")
    t.set_defaults(handler=run_table)


def run_regenerate(args: argparse.Namespace) -> int:
    from meshsim.calibrate.studies.study_catalog import StudySettings
    from meshsim.calibrate.studies.study_regenerate import regenerate

    args.flag_overrides = {"study": "--studies", "folder": "DIR", "out": "DIR"}
    settings = StudySettings(short=args.short, seed=args.seed, processes=args.processes)
    print_result(regenerate(args.out, settings, args.studies,
                            lambda msg: print(f"  {msg}", file=sys.stderr, flush=True)))
    return 0


def run_table(args: argparse.Namespace) -> int:
    from meshsim.calibrate.studies.study_regenerate import shipped_table

    args.flag_overrides = {"folder": "DIR"}
    print_result(shipped_table(args.folder))
    return 0
