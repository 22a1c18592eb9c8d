import re,sys
for f in sys.argv[1:]:
    print("==",f)
    name=None
    for line in open(f):
        m=re.match(r"^lab-(\S+)-2026\S+\s+(\S+)",line)
        if m: name=m.group(1)[:28]; vals={}; continue
        m=re.match(r"^\s+(p50|p99|rps) (?:ms)?\s+(\S+)\s+(\S+)\s+(\S+)",line)
        if m and name:
            vals[m.group(1)]=m.group(4)
            if m.group(1)=="rps": print(f"{name:30s} p50 {vals.get('p50'):>5s} p99 {vals.get('p99'):>5s} rps {vals['rps']:>5s}"); name=None
        if line.startswith("summary"): print(line[:200])
