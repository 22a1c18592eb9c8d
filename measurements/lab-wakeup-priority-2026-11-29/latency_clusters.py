"""How a run's latencies cluster in time: the share of their variance between windows of 5, 20 and 100 ms (by each
request's access-log timestamp), the lag-1 autocorrelation along each connection, and the cv.

Usage: python latency_clusters.py RUN_DIR ..."""
import gzip, json, glob, os, sys, numpy as np
for d in sys.argv[1:]:
    f = d+'/access.jsonl.gz' if os.path.exists(d+'/access.jsonl.gz') else d+'/access.jsonl'
    op = gzip.open if f.endswith('.gz') else open
    rows=[json.loads(l) for l in op(f,'rt')]
    t=np.array([r['timestamp'] for r in rows],float)/1e6; lat=np.array([r['latency'] for r in rows])*1e3
    t-=t.min()
    out=[]
    for binms in (5, 20, 100):
        b=(t//binms).astype(int)
        cnt=np.bincount(b); s=np.bincount(b,lat); ok=cnt>0
        means=s[ok]/cnt[ok]
        between=np.var(np.repeat(means,cnt[ok])); total=np.var(lat)
        out.append(f"{binms}ms {between/total:.2f}")
    ac=[]
    for th in set(r['thread'] for r in rows):
        x=np.array([r['latency'] for r in rows if r['thread']==th])
        ac.append(np.corrcoef(x[:-1],x[1:])[0,1])
    print(os.path.basename(d), "between-bin variance share:", ", ".join(out), f"| lag-1 autocorr {np.mean(ac):.2f} | cv {lat.std()/lat.mean():.2f}")
