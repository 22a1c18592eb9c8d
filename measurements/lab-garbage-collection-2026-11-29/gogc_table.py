"""The GOGC runs' latencies from their access logs: per setup and repeat, with the apps collecting (GOGC=100, Go's
default) and not (GOGC=off). Usage: python gogc_table.py gogc > gogc-table.txt"""
import gzip
import json
import sys
from pathlib import Path

import numpy as np

SETUPS = (("base800", "chain3 baseline, 800 rps paced"), ("base20000", "chain3 baseline, closed loop"),
          ("paced", "chain3 sidecars, 800 rps paced"), ("gogc", "chain3 sidecars, closed loop"),
          ("pair", "sidecar pair, closed loop"))


def row(folder: Path) -> str:
    run = next(folder.glob("lab-*"))
    rps = json.loads((run / "fortio.json").read_text())["ActualQPS"]
    with gzip.open(run / "access.jsonl.gz", "rt") as f:
        ms = np.array([json.loads(line)["latency"] * 1e3 for line in f])
    return (f"{folder.name:16s} {rps:7.0f} {ms.mean():7.2f} {ms.std() / ms.mean():5.2f} {np.percentile(ms, 50):7.2f} "
            f"{np.percentile(ms, 99):7.2f}")


def main(root: Path) -> None:
    print("folder            achieved  mean ms    cv  p50 ms  p99 ms   (16 connections, 5 s, 1 KB; from access.jsonl.gz)")
    for prefix, what in SETUPS:
        print(f"\n{what}")
        for gogc in ("100", "off"):
            for folder in sorted(root.glob(f"{prefix}-{gogc}-*"), key=lambda p: int(p.name.rsplit("-", 1)[1])):
                print(row(folder))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
