# Float32 simulation (numpy) of the Gated DeltaNet window fold: the direct delta-rule steps vs the
# scaled form of bench/experiments/gdn_scaled_fold.patch, both against float64. python3 this.py
import numpy as np
rng=np.random.default_rng(1)
KD=VD=128; f32=np.float32
def steps(m, gscale):
    k=rng.standard_normal((m,KD)); k/=np.linalg.norm(k,axis=1,keepdims=True)
    v=rng.standard_normal((m,VD))
    g=-np.exp(rng.uniform(-2,1.5,m))*np.log1p(np.exp(rng.standard_normal(m)-2))*gscale
    beta=1/(1+np.exp(-rng.standard_normal(m)))
    return k,v,g,beta
def direct(h,k,v,g,beta,dt):
    h=h.astype(dt).copy()
    for j in range(len(g)):
        a=dt(np.exp(dt(g[j]))); kj=k[j].astype(dt)
        kh=(h.T@kj).astype(dt)   # h[k][v]: contraction over k
        u=(dt(beta[j])*(v[j].astype(dt)-a*kh)).astype(dt)
        h=(a*h+np.outer(kj,u)).astype(dt)
    return h
def scaled(h,k,v,g,beta,dt=np.float32):
    h=h.astype(dt).copy(); A=dt(1)
    for j in range(len(g)):
        A=dt(A*dt(np.exp(dt(g[j]))))
        if A<dt(2.0**-64): h=(A*h).astype(dt); A=dt(1)
        kj=k[j].astype(dt); kh=(h.T@kj).astype(dt); ia=dt(dt(1)/A)
        u=(dt(beta[j])*(v[j].astype(dt)*ia-kh)).astype(dt)
        h=(h+np.outer(kj,u)).astype(dt)
    if A!=1: h=(A*h).astype(dt)
    return h
for gscale in [1, 5, 30]:
  for m in [2, 16, 32]:
    ed=[];es=[]
    for t in range(20):
        h0=rng.uniform(-0.3,0.3,(KD,VD))
        k,v,g,beta=steps(m,gscale)
        ref=direct(h0,k,v,g,beta,np.float64)
        d=direct(h0,k,v,g,beta,np.float32); s=scaled(h0,k,v,g,beta)
        n=np.linalg.norm(ref)
        ed.append(np.linalg.norm(d-ref)/n); es.append(np.linalg.norm(s-ref)/n)
    print(f"gscale {gscale:3d} m {m:2d}: direct rel err max {max(ed):.2e}  scaled {max(es):.2e}")
