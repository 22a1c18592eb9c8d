"""Per setup and GOMAXPROCS: the mean over rounds of each app's CPU per request (ms, process clocks), timeslices and
run-queue wait per request (schedstat), the achieved rate and the latency percentiles (fortio)."""
import collections, glob, json, statistics as st, sys
import yaml

def rows(folder):
    out = collections.defaultdict(list)
    for f in sorted(glob.glob(f"{folder}/gomaxprocs-*/lab-*")):
        g = f.split("/")[-2].split("-")[1]
        setup = f.split("/")[-1].split("-2026")[0][4:]
        m = yaml.safe_load(open(f"{f}/manifest.yaml")); rq = json.load(open(f"{f}/run-queue.json"))
        fo = json.load(open(f"{f}/fortio.json"))
        req = rq["requests"]
        r = {"rps": fo.get("ActualQPS", 0.0)}
        p = {x["Percentile"]: x["Value"] * 1e3 for x in fo["DurationHistogram"]["Percentiles"]}
        r["p50"], r["p99"] = p.get(50), p.get(99)
        for k in ("s1/app", "s2/app", "s3/app", "s1/sidecar"):
            if k in m["cpu_seconds"]:
                r[f"{k} cpu"] = m["cpu_seconds"][k] / req * 1e3
                r[f"{k} slices"] = rq["components"][k]["timeslices"] / req
                r[f"{k} wait"] = rq["components"][k]["wait_ms_per_request"]
        out[(setup, g)].append(r)
    return out

for folder in sys.argv[1:]:
    print(f"== {folder}")
    for key, v in sorted(rows(folder).items()):
        print(f"{key[0]:36s} GOMAXPROCS={key[1]:7s} n={len(v)} " +
              " ".join(f"{k}={st.mean(x[k] for x in v):.3f}" for k in v[0]))
