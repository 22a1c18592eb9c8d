import json, sys
A = json.load(open(sys.argv[1])); B = json.load(open(sys.argv[2]))
bb = {r['run']: r for r in B['runs']}
for r in A['runs']:
    s = bb[r['run']]
    if not r['run'].startswith('lab-chain3') or 'baseline' in r['run']:
        continue
    def e(x, k): return x['latency_ms'][k]['rel_error'] * 100
    line = f"{r['run'][4:34]:30s} p50 {e(r,'p50'):+4.0f}->{e(s,'p50'):+4.0f} p99 {e(r,'p99'):+4.0f}->{e(s,'p99'):+4.0f} rps {r['achieved_rps']['rel_error']*100:+4.0f}->{s['achieved_rps']['rel_error']*100:+4.0f} |"
    for k in ('s1/sidecar', 'client/sidecar', 's3/sidecar'):
        v, w = r['cpu_ms_per_request'].get(k), s['cpu_ms_per_request'].get(k)
        if v: line += f" {k.split('/')[0]} {v['measured']:.3f}: {v['predicted']:.3f}->{w['predicted']:.3f}"
    print(line)
for X, n in ((A, 'base'), (B, 'side')):
    print(n, {k: X['summary'].get(k) for k in ('p50', 'p99', 'achieved_rps')} if isinstance(X['summary'], dict) else X['summary'])
