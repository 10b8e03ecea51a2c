#!/bin/bash
# Interleaved runs of cmd/wheelq-bench -workload precision (the wheel
# alone against time.AfterFunc) for each given binary, with the ratios
# issue 11 sets (wheel p99 <= 1/4 and p99.9 <= 1/2 of AfterFunc).
# usage: prec.sh RUNS bin1 [bin2 ...] -- interleaved runs of the wheel-alone precision workload
runs=$1; shift
for i in $(seq $runs); do for b in "$@"; do
  flock /tmp/cpu.lock $b -workload precision 2>/dev/null | sed "s|^|$b |"
done; done | python3 -c '
import sys,json,collections
d=collections.defaultdict(list)
for l in sys.stdin:
    b,j=l.split(" ",1); r=json.loads(j); d[b].append(r)
for b,rs in d.items():
    w=[r for r in rs if r["system"]=="wheel"]; a=[r for r in rs if r["system"]!="wheel"]
    ok=0
    for x,y in zip(w,a):
        r99=x["p99_us"]/y["p99_us"]; r999=x["p999_us"]/y["p999_us"]; good=r99<=0.25 and r999<=0.5; ok+=good
        print(b,"wheel p99",x["p99_us"],"AF",y["p99_us"],"ratio %.2f"%r99,"| p999",x["p999_us"],"AF",y["p999_us"],"ratio %.2f"%r999,"OK" if good else "FAIL")
    print(b,"passing runs",ok,"of",len(w))
'
