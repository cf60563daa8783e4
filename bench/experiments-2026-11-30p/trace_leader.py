#!/usr/bin/env python3
"""Cluster leaders against their senders in a `harness trace` TSV (gzipped).

For each config and M of the trace: per tile, when the leader CTA (cluster
rank 0) and the last of its senders finished their MMA loops and their
epilogues, from the grid's first wait return, and how long the leader ended
after the last sender; and the grid's end. Configs and cluster sizes are
listed below. Session 2026-11-30p, call 1 (the numbers carry the trace
marks' overhead: read them for their shape).

usage: trace_leader.py TRACE.tsv.gz
"""
import gzip, statistics as st, collections, sys
path=sys.argv[1]
rows=[l.rstrip('\n').split('\t') for l in gzip.open(path,'rt')]
h=rows[0]; rows=[dict(zip(h,r)) for r in rows[1:]]
for r in rows:
    for k in r:
        if k!='cfg': r[k]=int(r[k])
def launches(rs):
    byw=collections.defaultdict(list)
    for x in rs: byw[x['wlo']].append(x)
    out=[]
    for v in byw.values():
        v.sort(key=lambda x:x['g0']); cur=[v[0]]
        for x in v[1:]:
            if x['g0']-cur[-1]['g0']>30000: out.append(cur); cur=[]
            cur.append(x)
        out.append(cur)
    return [L for L in out if len(L)==L[0]['nctas']]
for cfg,cs in [("32/4/g/8/4/p",4),("32/4/g/16/2/p",2),("16/8/g/16/1/p",1)]:
  for m in [2,3,6,8]:
    rs=[r for r in rows if r['cfg']==cfg and r['m']==m]
    if not rs: continue
    stats=collections.defaultdict(list)
    for L in launches(rs):
        rel=min(c['g1'] for c in L)
        tiles=collections.defaultdict(dict)
        for c in L: tiles[c['blk']//cs][c['blk']%cs]=c
        for t,d in tiles.items():
            ld=d[0]; snd=[d[k] for k in range(1,cs)]
            stats['leader mma done'].append(ld['g2']-rel)
            stats['leader end'].append(ld['g3']-rel)
            if snd:
                stats['senders mma done max'].append(max(s['g2'] for s in snd)-rel)
                stats['senders end max'].append(max(s['g3'] for s in snd)-rel)
                stats['leader end - last sender end'].append(ld['g3']-max(s['g3'] for s in snd))
        stats['grid end'].append(max(c['g3'] for c in L)-rel)
    print(cfg,"M",m, "launches", len(stats['grid end']))
    for k,v in stats.items(): print("   %-30s med %5d p10 %5d p90 %5d"%(k,st.median(v),sorted(v)[int(0.1*len(v))],sorted(v)[int(0.9*len(v))]))
