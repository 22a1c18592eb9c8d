"""`meshsim ARGS` with the lab fit's host left first come, first served (no ``cluster.woken_first``): the reference
the older collections' refits (older-collections.sh) are compared with, fitted by the same code otherwise.

Usage: python fcfs_meshsim.py calibrate|fit ARGS ..."""

import sys

from meshsim.calibrate import fit_runs
from meshsim.cli import main

fit_runs.with_lab_scheduler = lambda model, runs: model
sys.exit(main(sys.argv[1:]))
