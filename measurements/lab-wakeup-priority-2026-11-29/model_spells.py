"""The model's replays in `meshsim validate` (fast engine): how their latencies cluster in time, as
latency_clusters.py measures the runs: per replay (the replications averaged), the share of the latency variance
between windows of 5, 20 and 100 ms (by each latency's send time) and the cv. Prints validate's output first.

Usage (from a collection's folder): python model_spells.py VALIDATE_ARGS ..."""
import sys
import numpy as np
from meshsim.cli import main
from meshsim.sim.experiments import predict

CALLS = []
_orig = predict.latency_estimates


def stash(results, cut, expected):
    CALLS.append([(np.asarray(r.latencies).copy(), np.asarray(r.filed_at).copy(), r.achieved_rps) for r in results])
    return _orig(results, cut, expected)


predict.latency_estimates = stash
code = main(["validate", *sys.argv[1:]])
for i, call in enumerate(CALLS):
    shares = {5: [], 20: [], 100: []}
    cvs = []
    for lat, at, rps in call:
        if len(lat) < 100 or len(at) != len(lat):
            continue
        lat = lat * 1e3
        t = (at - at.min()) * 1e3
        total = np.var(lat)
        cvs.append(lat.std() / lat.mean())
        for b in shares:
            k = (t // b).astype(int)
            cnt = np.bincount(k); s = np.bincount(k, lat); ok = cnt > 0
            shares[b].append(np.var(np.repeat(s[ok] / cnt[ok], cnt[ok])) / total)
    rps = np.mean([c[2] for c in call])
    print(f"call {i}: {rps:.0f} rps, between-window variance share " +
          ", ".join(f"{b}ms {np.mean(v):.2f}" for b, v in shares.items() if v) + f" | cv {np.mean(cvs):.2f}")
sys.exit(code)
