"""Each run's p50 in each fifth of its length (by access-log timestamp), and the last fifth's over the first's: a drift
within the run, or a warm-up trend if the ratio is below 1 everywhere.

Usage: python run_fifths.py RUN_DIR ..."""
import gzip, json, numpy as np, glob, sys, os
for d in sys.argv[1:]:
    f = d+'/access.jsonl.gz' if os.path.exists(d+'/access.jsonl.gz') else d+'/access.jsonl'
    if not os.path.exists(f): continue
    op = gzip.open if f.endswith('.gz') else open
    rows=[json.loads(l) for l in op(f,'rt')]
    t=np.array([r['timestamp'] for r in rows],float)/1e9; lat=np.array([r['latency'] for r in rows])*1e3
    t-=t.min(); T=t.max()
    q=[np.median(lat[(t>=a*T/5)&(t<(a+1)*T/5)]) for a in range(5)]
    print(f"{os.path.basename(d):52s} {T:4.1f}s p50 by fifth: " + ' '.join(f"{x:6.2f}" for x in q) + f"  last/first {q[-1]/q[0]:.2f}")
