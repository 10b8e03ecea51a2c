#!/bin/bash
# Interleaved runs of cmd/wheelq-bench -workload precision64 for each given
# binary (built from the commits to compare), and their medians. Heavy runs
# take turns on /tmp/cpu.lock.
# usage: p64.sh RUNS bin1 [bin2 ...]  -- interleaved precision64 runs, medians
runs=$1; shift
for i in $(seq $runs); do for b in "$@"; do
  flock /tmp/cpu.lock $b -workload precision64 2>/dev/null | sed "s|^|$b |"
done; done | python3 -c '
import sys,json,statistics as st,collections
d=collections.defaultdict(list)
for l in sys.stdin:
    b,j=l.split(" ",1); r=json.loads(j); d[(b,r["system"])].append(r)
for k,rs in sorted(d.items()):
    f=lambda x:[r.get(x) for r in rs]
    print(k[0],k[1],"p99",f("p99_us"),"med",st.median(f("p99_us")),"p999 med",st.median(f("p999_us")),"p50 med",st.median(f("p50_us")),"fireB",f("firing_alloc_bytes_per_job"),"gc",f("firing_gc_cycles"),"early",sum(f("early")),"missing",sum(f("missing")))
'
