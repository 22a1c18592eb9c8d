"""`meshsim validate` with the lab replay's forwarding apps at a spin share of SHARE (environment; unset: as shipped,
calibrate/validation/forwarding_wake.py SPIN_SHARE). Run from the repository's root."""
import os
import sys

import meshsim.calibrate.validation.forwarding_wake as forwarding_wake
from meshsim.cli import main

if "SHARE" in os.environ:
    forwarding_wake.SPIN_SHARE = float(os.environ["SHARE"])
sys.exit(main(["validate", *sys.argv[1:]]))
