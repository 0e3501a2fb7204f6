"""GPU tests of the PyTorch binding against a float64 torch reference.

The reference mirrors include/replayssm/reference.hpp (eager form of both rules) in torch
float64, run on the exact bf16 inputs the kernels see. Checked: 40 decode steps (two in-launch
commits per sequence) with the batch rows permuted every step and a padding row, the eager
baseline beside it, a CUDA-graph-captured decode step, speculative verify + accept rounds, and
that nothing outside the listed slots (padding rows, other slots, their buffers) is touched.

    cd examples/pytorch && python -m pytest -q test_replayssm_torch.py
"""

import os
import sys

import pytest

torch = pytest.importorskip("torch")

from torch.utils import cpp_extension  # noqa: E402


def _skip_reason():
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if cpp_extension.CUDA_HOME is None:
        return "needs the CUDA toolkit (nvcc) to build the extension"
    if "REPLAYSSM_CUDA_ARCH" not in os.environ and torch.cuda.get_device_capability() < (9, 0):
        return "the extension is built for sm_90 (set REPLAYSSM_CUDA_ARCH for another GPU)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

DEV = "cuda"
PAD = -1
OUT_TOL = 1e-2  # relative L2 error of a bf16 output row (bf16 rounding is 2**-9 per element)
STATE_TOL = 1e-4  # relative L2 error of an fp32 state
SENTINEL = 7.0  # output rows that must not be written are filled with it first


@pytest.fixture(scope="module")
def rt():
    import replayssm_torch

    replayssm_torch.load(verbose=os.environ.get("REPLAYSSM_VERBOSE_BUILD") == "1")
    return replayssm_torch


# --- float64 reference (reference.hpp, in torch) ---------------------------------------------


def softplus(x):
    """vLLM's threshold convention, as ref::softplus."""
    return torch.where(x > 20, x, torch.log1p(torch.exp(x)))


def silu(x):
    return x / (1 + torch.exp(-x))


def mamba2_ref_step(h, x, dt, B, C, z, A, D, dt_bias):
    """ref::mamba2_eager_step for a stack of sequences, float64; updates h in place.

    h [S, H, P, N]; x, z [S, H, P]; dt [S, H] (raw); B, C [S, G, N]; A, D, dt_bias [H].
    dt = softplus(dt + dt_bias); h = exp(A dt) h + dt x B^T; y = (h C + D x) silu(z).
    """
    hpg = h.shape[1] // B.shape[1]  # head h uses group h // hpg
    Bh, Ch = B.repeat_interleave(hpg, dim=1), C.repeat_interleave(hpg, dim=1)
    dt = softplus(dt + dt_bias)
    h.mul_(torch.exp(A * dt)[..., None, None])
    h.add_((dt[..., None] * x)[..., None] * Bh[:, :, None, :])
    y = torch.einsum("shpn,shn->shp", h, Ch) + D[:, None] * x
    return y * silu(z)


def gdn_ref_step(h, q, k, v, g, beta, scale=0.0):
    """ref::gdn_eager_step for a stack of sequences, float64; updates h in place.

    h [S, Hv, K, V]; q, k [S, Hk, K] (raw: L2-normalised here, eps 1e-6 inside the sqrt, q
    scaled); v [S, Hv, V]; g, beta [S, Hv].
    h = exp(g) h; v' = beta (v - h^T k); h += k v'^T; o = h^T q.
    """
    K = q.shape[-1]
    scale = scale or K**-0.5
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * scale
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    vpk = h.shape[1] // q.shape[1]  # value head h uses q/k head h // vpk
    q, k = q.repeat_interleave(vpk, dim=1), k.repeat_interleave(vpk, dim=1)
    h.mul_(torch.exp(g)[..., None, None])
    vp = beta[..., None] * (v - torch.einsum("shkv,shk->shv", h, k))
    h.add_(k[..., :, None] * vp[..., None, :])
    return torch.einsum("shkv,shk->shv", h, q)


# --- the two rules behind one interface --------------------------------------------------------


def _randn(gen, *shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _uniform(gen, lo, hi, *shape):
    return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)


def _bf16(t):
    return t.to(DEV, torch.bfloat16)


class Mamba2Case:
    """Mamba-2, 16 heads in 4 groups, headdim 64, dstate 128."""

    nheads, ngroups, headdim, dstate = 16, 4, 64, 128

    def __init__(self, rt, gen):
        self.rt, self.gen = rt, gen
        H = self.nheads
        self.A = (-torch.exp(_uniform(gen, -4, 1, H))).to(DEV, torch.float32)
        self.dt_bias = (0.5 * _randn(gen, H)).to(DEV, torch.float32)
        self.D = (1 + 0.1 * _randn(gen, H)).to(DEV, torch.float32)

    def random_state(self, n):
        return (0.3 * _randn(self.gen, n, self.nheads, self.headdim, self.dstate)).to(
            DEV, torch.float32)

    def make_cache(self, pool):
        return self.rt.Mamba2ReplayCache(pool, self.ngroups, self.A, D=self.D,
                                         dt_bias=self.dt_bias)

    def random_step(self, rows):
        g, H, G = self.gen, self.nheads, self.ngroups
        return dict(x=_bf16(_randn(g, rows, H, self.headdim)),
                    dt=_bf16(_uniform(g, -4, 1, rows, H)),
                    B=_bf16(_randn(g, rows, G, self.dstate)),
                    C=_bf16(_randn(g, rows, G, self.dstate)),
                    z=_bf16(_randn(g, rows, H, self.headdim)))

    def out_like(self, rows):
        return torch.full((rows, self.nheads, self.headdim), SENTINEL, dtype=torch.bfloat16,
                          device=DEV)

    def ref_step(self, h, step):
        s = {key: v.double() for key, v in step.items()}
        return mamba2_ref_step(h, s["x"], s["dt"], s["B"], s["C"], s["z"], self.A.double(),
                               self.D.double(), self.dt_bias.double())

    def eager_step(self, pool, idx, step, out):
        self.rt.mamba2_eager_step(pool, idx, A=self.A, D=self.D, dt_bias=self.dt_bias, out=out,
                                  **step)


class GdnCase:
    """Gated DeltaNet, 4 q/k heads, 8 value heads, K = V = 128."""

    num_k_heads, num_v_heads, head_k_dim, head_v_dim = 4, 8, 128, 128

    def __init__(self, rt, gen):
        self.rt, self.gen = rt, gen

    def random_state(self, n):
        return (0.3 * _randn(self.gen, n, self.num_v_heads, self.head_k_dim, self.head_v_dim)).to(
            DEV, torch.float32)

    def make_cache(self, pool):
        return self.rt.GatedDeltaNetReplayCache(pool, self.num_k_heads)

    def random_step(self, rows):
        g, Hk, Hv = self.gen, self.num_k_heads, self.num_v_heads
        # Gates as the models make them: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
        log_gate = -torch.exp(_uniform(g, -3, 1, rows, Hv)) * softplus(_randn(g, rows, Hv) - 2)
        return dict(q=_bf16(_randn(g, rows, Hk, self.head_k_dim)),
                    k=_bf16(_randn(g, rows, Hk, self.head_k_dim)),
                    v=_bf16(_randn(g, rows, Hv, self.head_v_dim)),
                    g=log_gate.to(DEV, torch.float32),
                    beta=torch.sigmoid(_randn(g, rows, Hv)).to(DEV, torch.float32))

    def out_like(self, rows):
        return torch.full((rows, self.num_v_heads, self.head_v_dim), SENTINEL,
                          dtype=torch.bfloat16, device=DEV)

    def ref_step(self, h, step):
        s = {key: v.double() for key, v in step.items()}
        return gdn_ref_step(h, s["q"], s["k"], s["v"], s["g"], s["beta"])

    def eager_step(self, pool, idx, step, out):
        self.rt.gdn_eager_step(pool, idx, out=out, **step)


CASES = pytest.mark.parametrize("case_cls", [Mamba2Case, GdnCase], ids=["mamba2", "gdn"])
# decode_step with and without a workspace (the split replay step / the fused kernel)
SPLIT = pytest.mark.parametrize("split", [False, True], ids=["fused", "split"])


def rel_err(got, ref):
    return ((got.double() - ref).norm() / ref.norm()).item()


def rows_of(step, rows):
    """The step's inputs of the given input rows."""
    r = torch.as_tensor(rows, device=DEV)
    return {key: v[r] for key, v in step.items()}


def ref_advance(case, ref, seqs, step):
    """Applies one step (one input row per sequence) to ref[seqs]; returns the outputs."""
    h = ref[seqs].clone()
    y = case.ref_step(h, step)
    ref[seqs] = h
    return y


def untouched(pool, pool0, cache, used_slots):
    """Slots not in used_slots: state bit-identical, buffers and cursor still zero."""
    unused = [s for s in range(pool.shape[0]) if s not in used_slots]
    assert torch.equal(pool[unused], pool0[unused])
    assert int(cache.cursor[unused].abs().sum()) == 0
    for name, buf in vars(cache).items():
        if name.startswith("buf_"):
            assert int((buf[unused] != 0).sum()) == 0, name


def start(case, num_slots, nseq):
    """A pool with data in every slot, a cache over it, and nseq sequences loaded (as after
    prefill) into slots picked at random; returns (pool, pool0, cache, slots, ref)."""
    pool = case.random_state(num_slots)
    pool0 = pool.clone()
    cache = case.make_cache(pool)
    slots = [int(s) for s in torch.randperm(num_slots, generator=case.gen)[:nseq]]
    init = case.random_state(nseq)
    cache.load_state(torch.tensor(slots, dtype=torch.int32, device=DEV), init)
    assert all(int(cache.cursor[s]) == 0 for s in slots)
    return pool, pool0, cache, slots, init.double()


# --- tests --------------------------------------------------------------------------------------


@SPLIT
@CASES
def test_decode_steps_match_float64_reference(rt, case_cls, split):
    """40 decode steps (commits at 16 and 32 inside decode_step), rows permuted every step with
    one padding row, the eager baseline on a copy of the pool; then materialize and commit."""
    c = case_cls(rt, torch.Generator().manual_seed(1234))
    num_slots, nseq, steps = 7, 3, 40
    pool, pool0, cache, slots, ref = start(c, num_slots, nseq)
    if split:
        cache.reserve_workspace(nseq + 1).fill_(float("nan"))  # scratch: no value may leak
    eager_pool = pool0.clone()
    eager_pool[slots] = ref.float()
    K = cache.commit_interval
    worst = worst_eager = 0.0
    for t in range(steps):
        order = torch.randperm(nseq + 1, generator=c.gen).tolist()  # value nseq: padding
        seq_of_row = [s if s < nseq else PAD for s in order]
        idx = torch.tensor([slots[s] if s != PAD else PAD for s in seq_of_row], dtype=torch.int32,
                           device=DEV)
        step = c.random_step(nseq + 1)
        out, out_e = c.out_like(nseq + 1), c.out_like(nseq + 1)
        cache.decode_step(idx, out=out, **step)
        c.eager_step(eager_pool, idx, step, out_e)
        live = [b for b, s in enumerate(seq_of_row) if s != PAD]
        y = ref_advance(c, ref, [seq_of_row[b] for b in live], rows_of(step, live))
        for i, b in enumerate(live):
            e, ee = rel_err(out[b], y[i]), rel_err(out_e[b], y[i])
            assert e < OUT_TOL, f"step {t} row {b}: replay error {e:.2e}"
            assert ee < OUT_TOL, f"step {t} row {b}: eager error {ee:.2e}"
            worst, worst_eager = max(worst, e), max(worst_eager, ee)
        pad_row = seq_of_row.index(PAD)
        assert bool((out[pad_row] == SENTINEL).all()), f"step {t}: padding row written"
        assert bool((out_e[pad_row] == SENTINEL).all()), f"step {t}: eager padding row written"
    print(f"[{case_cls.__name__}] {steps} steps: max output error replay {worst:.2e}, "
          f"eager {worst_eager:.2e}")

    live_idx = torch.tensor(slots, dtype=torch.int32, device=DEV)
    assert cache.cursor[slots].tolist() == [steps % K] * nseq  # two in-launch commits each
    assert rel_err(cache.materialize(live_idx), ref) < STATE_TOL
    assert rel_err(eager_pool[slots], ref) < STATE_TOL
    cache.commit(live_idx)
    assert cache.cursor[slots].tolist() == [0] * nseq
    assert rel_err(pool[slots], ref) < STATE_TOL  # the checkpoint alone is current now
    untouched(pool, pool0, cache, slots)
    assert torch.equal(eager_pool[[s for s in range(num_slots) if s not in slots]],
                       pool0[[s for s in range(num_slots) if s not in slots]])


@SPLIT
@CASES
def test_speculative_rounds_match_float64_reference(rt, case_cls, split):
    """verify_step + accept (MaxDraft 4) after 13 decode steps, so that the accepted drafts
    fill a window of K = 16; two rounds back to back, then a decode step, materialize and
    commit. Every draft position is compared with the reference along its draft chain. With a
    workspace (split): decode_step's split replay step and verify_step's split verification."""
    c = case_cls(rt, torch.Generator().manual_seed(4321))
    num_slots, nseq = 5, 2
    pool, pool0, cache, slots, ref = start(c, num_slots, nseq)
    if split:
        cache.reserve_workspace(3).fill_(float("nan"))  # scratch: no value may leak
    MD, K = cache.max_draft, cache.commit_interval
    seq_of_row = [1, PAD, 0]  # batch rows: sequence 1, padding, sequence 0
    batch = len(seq_of_row)
    live = [b for b, s in enumerate(seq_of_row) if s != PAD]
    idx = torch.tensor([slots[s] if s != PAD else PAD for s in seq_of_row], dtype=torch.int32,
                       device=DEV)

    def decode():
        step = c.random_step(batch)
        out = c.out_like(batch)
        cache.decode_step(idx, out=out, **step)
        y = ref_advance(c, ref, [seq_of_row[b] for b in live], rows_of(step, live))
        for i, b in enumerate(live):
            assert rel_err(out[b], y[i]) < OUT_TOL
        assert bool((out[seq_of_row.index(PAD)] == SENTINEL).all())

    for _ in range(K - 3):
        decode()

    worst = 0.0
    for num_draft, accepted in (([4, 2, 3], [3, 0, 2]), ([4, 4, 2], [4, 4, 1])):
        step = c.random_step(batch * MD)  # draft t of row b is input row b * MD + t
        out = c.out_like(batch * MD)
        nd = torch.tensor(num_draft, dtype=torch.int32, device=DEV)
        acc = torch.tensor(accepted, dtype=torch.int32, device=DEV)
        cache.verify_step(idx, nd, out=out, **step)
        for b in range(batch):
            s = seq_of_row[b]
            n = num_draft[b] if s != PAD else 0
            for t in range(n, MD):  # absent drafts and the padding row: not written
                assert bool((out[b * MD + t] == SENTINEL).all()), f"row {b} draft {t} written"
            if s == PAD:
                continue
            h = ref[[s]].clone()  # the sequence's state, then its drafts 0..t
            for t in range(n):
                y = c.ref_step(h, rows_of(step, [b * MD + t]))
                e = rel_err(out[b * MD + t], y[0])
                assert e < OUT_TOL, f"row {b} draft {t}: error {e:.2e}"
                worst = max(worst, e)
        cache.accept(idx, acc, nd)
        for b in live:  # the accepted drafts become the sequence
            s = seq_of_row[b]
            for t in range(accepted[b]):
                ref_advance(c, ref, [s], rows_of(step, [b * MD + t]))
        # checkpoint + buffer now hold exactly the accepted steps
        live_idx = torch.tensor([slots[seq_of_row[b]] for b in live], dtype=torch.int32,
                                device=DEV)
        assert rel_err(cache.materialize(live_idx), ref[[seq_of_row[b] for b in live]]) < STATE_TOL
    print(f"[{case_cls.__name__}] speculative rounds: max draft output error {worst:.2e}")

    decode()  # the next step sees the accepted drafts (and folds a full window)
    live_idx = torch.tensor(slots, dtype=torch.int32, device=DEV)
    assert rel_err(cache.materialize(live_idx), ref) < STATE_TOL
    cache.commit(live_idx)
    assert cache.cursor[slots].tolist() == [0] * nseq
    assert rel_err(pool[slots], ref) < STATE_TOL
    untouched(pool, pool0, cache, slots)


@SPLIT
@CASES
def test_decode_step_replays_in_a_cuda_graph(rt, case_cls, split):
    """One decode step captured in a CUDA graph (so it must launch on torch's current stream and
    allocate nothing), replayed 20 times with new inputs: commits happen inside the replays.
    With a workspace the graph holds the coefficient kernel and the decode grid (PDL edge)."""
    c = case_cls(rt, torch.Generator().manual_seed(99))
    num_slots, nseq = 4, 2
    pool, pool0, cache, slots, ref = start(c, num_slots, nseq)
    seq_of_row = [0, PAD, 1]
    batch = len(seq_of_row)
    if split:
        cache.reserve_workspace(batch)
    live = [b for b, s in enumerate(seq_of_row) if s != PAD]
    idx = torch.tensor([slots[s] if s != PAD else PAD for s in seq_of_row], dtype=torch.int32,
                       device=DEV)
    static = c.random_step(batch)
    out = c.out_like(batch)
    # Warm-up on padding rows only (loads the kernels, touches nothing).
    cache.decode_step(torch.full_like(idx, PAD), out=out, **static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cache.decode_step(idx, out=out, **static)
    for t in range(20):
        new = c.random_step(batch)
        for key in static:
            static[key].copy_(new[key])
        graph.replay()
        y = ref_advance(c, ref, [seq_of_row[b] for b in live], rows_of(new, live))
        for i, b in enumerate(live):
            e = rel_err(out[b], y[i])
            assert e < OUT_TOL, f"replay {t} row {b}: error {e:.2e}"
        assert bool((out[seq_of_row.index(PAD)] == SENTINEL).all())
    assert cache.cursor[slots].tolist() == [20 % cache.commit_interval] * nseq
    live_idx = torch.tensor(slots, dtype=torch.int32, device=DEV)
    assert rel_err(cache.materialize(live_idx), ref) < STATE_TOL
    untouched(pool, pool0, cache, slots)


def test_errors_become_python_exceptions(rt):
    """A failed replayssm::result is a RuntimeError with the library's message; tensor checks
    on the C++ side name the offending argument."""
    c = Mamba2Case(rt, torch.Generator().manual_seed(5))
    pool = c.random_state(3)
    cache = c.make_cache(pool)
    idx = torch.tensor([2, 0], dtype=torch.int32, device=DEV)
    step = c.random_step(2)
    with pytest.raises(RuntimeError, match="null_slot lies inside"):  # the library's check
        cache.decode_step(idx, pad_slot_id=1, **step)
    with pytest.raises(RuntimeError, match="x must be BFloat16"):
        cache.decode_step(idx, **{**step, "x": step["x"].float()})
    with pytest.raises(RuntimeError, match="state_indices must be on"):
        cache.decode_step(idx.cpu(), **step)
    with pytest.raises(RuntimeError, match="B must have shape"):
        cache.decode_step(idx, **{**step, "B": step["B"][:, :2]})
    with pytest.raises(RuntimeError, match="state_indices must be Int"):
        cache.decode_step(idx.long(), **step)
    small = torch.empty(rt.load().mamba2_workspace_elems(1, pool.shape[1]), device=DEV)
    with pytest.raises(RuntimeError, match="workspace_size is smaller"):  # the library's check
        cache.decode_step(idx, workspace=small, **step)
    with pytest.raises(RuntimeError, match="workspace must be Float"):
        cache.decode_step(idx, workspace=small.double(), **step)
    MD = cache.max_draft
    nd = torch.tensor([MD, 1], dtype=torch.int32, device=DEV)
    tiny = torch.empty(rt.load().mamba2_verify_workspace_elems(1, c.ngroups), device=DEV)
    with pytest.raises(RuntimeError, match="smaller than verify_workspace_elems"):
        cache.verify_step(idx, nd, workspace=tiny, **c.random_step(2 * MD))
    torch.cuda.synchronize()
    assert int(cache.cursor.abs().sum()) == 0  # nothing was launched
