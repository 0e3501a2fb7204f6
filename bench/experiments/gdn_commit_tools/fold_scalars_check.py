# fold_scalars (gdn_commit_fast.patch) vs the per-step form it replaces, in float32 (numpy):
# same A_j, rescale factors, 1/A_j and final A bit for bit, incl. rescales, -inf and NaN gates.
import numpy as np
f = np.float32; tiny = f(5.421010862427522e-20)
def seq(g):
    A = f(1); out = []
    for gj in g:
        A = f(A * np.exp(f(gj)))
        r = f(1)
        if A < tiny: r = A; A = f(1)
        out.append((r, f(1) / A))
    return out, A
def par(g, S):
    m = len(g); gs = list(g) + [f(np.random.randn() * 50) for _ in range(S - m)]  # garbage past m
    out = []; Am = f(1)
    for j in range(m):
        A = f(1); r = f(1)
        for i in range(S):
            Ai = f(A * np.exp(f(gs[i]))); low = Ai < tiny; on = i <= j
            r = (Ai if low else f(1)) if on else r
            A = (f(1) if low else Ai) if on else A
        out.append((r, f(1) / A))
        if j == m - 1: Am = A
    return out, Am
rng = np.random.default_rng(1); bad = 0
with np.errstate(all='ignore'):
    for t in range(3000):
        m = int(rng.integers(0, 18)); g = (rng.standard_normal(m) * rng.choice([0.1, 3, 30])).astype(f)
        if m and rng.random() < 0.1: g[rng.integers(m)] = rng.choice([-np.inf, np.nan, -200.0])
        a, b = seq(g), par(g, 17)
        ok = all(np.array([x[0], x[1]]).tobytes() == np.array([y[0], y[1]]).tobytes() for x, y in zip(a[0], b[0]))
        ok = ok and np.array(a[1]).tobytes() == np.array(b[1]).tobytes()
        bad += not ok
print('mismatches', bad, 'of 3000')
