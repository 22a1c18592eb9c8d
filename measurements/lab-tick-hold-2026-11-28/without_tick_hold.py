"""The same model without its fitted tick hold (the "before" of this folder's validations):

    python without_tick_hold.py envoy-lab.yaml envoy-lab-without-tick-hold.yaml
"""
import sys

import yaml

model = yaml.safe_load(open(sys.argv[1]))
del model["cluster"]["tick_hold"]
with open(sys.argv[2], "w") as out:
    yaml.safe_dump(model, out, sort_keys=False, width=120)
