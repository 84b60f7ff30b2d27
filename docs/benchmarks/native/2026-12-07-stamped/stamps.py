import struct, sys, statistics
F=1996.248e6/1e9
def load(p):
    b=open(p,'rb').read()
    n=len(b)//128
    return b,n
cb,n=load('/tmp/st-client.bin'); sb,_=load('/tmp/st-core.bin')
def row(b,i): return struct.unpack_from('<16Q',b,i*128)
rows=[]
for i in range(n):
    c=row(cb,i)
    if c[0]==0 or c[8]==0 or c[7]==0 or c[1]==0: continue
    s=row(sb,i)
    if s[3]==0 or s[5]==0: continue
    rows.append((c,s))
rows=rows[-20000:]
print("rows",len(rows))
def pct(x,p): x=sorted(x); return x[int(p/100*(len(x)-1))]
def d(f,name):
    x=[f(c,s)/F for c,s in rows]
    print(f"{name:52s} p50 {pct(x,50):7.1f} p10 {pct(x,10):7.1f} p90 {pct(x,90):7.1f} ns")
d(lambda c,s:c[1]-c[0],"client: t0 -> before am_send (Get, encode)")
d(lambda c,s:c[2]-c[1],"client: am_send ObjectGet (+ return to Get)")
d(lambda c,s:s[9]-c[1],"  client send -> core progress start")
d(lambda c,s:s[3]-c[1],"client send -> core AM callback")
d(lambda c,s:s[3]-s[9],"core: progress start -> AM callback")
d(lambda c,s:s[4]-s[3],"core: callback -> handler (Deliver)")
d(lambda c,s:s[5]-s[4],"core: handler -> before am_send answer")
d(lambda c,s:s[6]-s[5],"core: am_send ObjectLent")
d(lambda c,s:c[10]-s[5],"  core send -> client progress start")
d(lambda c,s:c[7]-s[5],"core send -> client AM callback")
d(lambda c,s:c[7]-c[10],"client: progress start -> AM callback")
d(lambda c,s:c[8]-c[7],"client: callback -> on_meta")
d(lambda c,s:c[8]-c[0],"TOTAL t0 -> on_meta")
d(lambda c,s:c[11]-c[8],"client: on_meta -> Get returns (sink, release)")
