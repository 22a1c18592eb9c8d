"""A thread pinned to one core sleeps 1 ms and wakes, N times, beside a CPU-bound spinner on the same core of a
given nice: its run-queue wait per wake-up, from its own schedstat. Prints JSON."""
import json, os, subprocess, sys, time
nice = int(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
core = int(sys.argv[3]) if len(sys.argv) > 3 else 0
os.sched_setaffinity(0, {core})
spinner = None
if nice >= 0:
    spinner = subprocess.Popen([sys.executable, "-c", f"import os,time\nos.sched_setaffinity(0,{{{core}}})\nos.nice({nice})\nend=time.monotonic()+60\nwhile time.monotonic()<end: pass"])
    time.sleep(0.5)
def ss():
    return [int(v) for v in open(f"/proc/self/task/{os.getpid()}/schedstat").read().split()]
waits = []
a = ss()
for _ in range(n):
    b = ss()
    time.sleep(0.001)
    c = ss()
    waits.append((c[1] - b[1]) / 1e3)  # us waited around one sleep/wake (the wake's run-queue wait)
z = ss()
if spinner: spinner.kill(); spinner.wait()
waits.sort()
q = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))]
print(json.dumps({"spinner_nice": nice, "wakes": n, "wait_us_mean": round(sum(waits) / n, 1), "p50": q(.5), "p90": q(.9), "p99": q(.99), "max": waits[-1]}))
