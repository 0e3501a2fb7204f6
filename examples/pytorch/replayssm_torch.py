"""PyTorch binding of ReplaySSM (example): builds the extension and wraps its ops.

``load()`` JIT-compiles ``replayssm_torch.cu`` with ``torch.utils.cpp_extension`` (cached under
``TORCH_EXTENSIONS_DIR``) and registers the ops ``torch.ops.replayssm.*``. The classes below
allocate ReplaySSM's per-layer additions to an engine's cache (the input buffer and the cursors)
next to the engine's own ``ssm_state`` tensor, and call the ops with them:

* ``Mamba2ReplayCache``: ``ssm_state [num_slots, nheads, 64, 128]`` fp32, bf16 activations.
* ``GatedDeltaNetReplayCache``: ``ssm_state [num_slots, num_v_heads, 128, 128]`` fp32
  (``[K, V]`` per head, the flash-linear-attention layout), bf16 q/k/v, fp32 g/beta.

Policy (compiled into the extension): buffer length L = 32, commit interval K = 16, speculative
rounds of up to 4 tokens per row. Rows whose ``state_indices`` entry is ``pad_slot_id`` (-1) are
skipped and none of their memory is touched.
"""

import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "include"))
PAD_SLOT_ID = -1

_ops = None


def load(verbose=False):
    """Builds (once; torch caches the build) and loads the extension; returns torch.ops.replayssm.

    The target is ``-arch=sm_90`` (H100/H200) unless ``REPLAYSSM_CUDA_ARCH`` names another
    (e.g. ``sm_100``).
    """
    global _ops
    if _ops is None:
        from torch.utils import cpp_extension

        arch = os.environ.get("REPLAYSSM_CUDA_ARCH", "sm_90")
        cpp_extension.load(
            name="replayssm_torch_ext",
            sources=[os.path.join(HERE, "replayssm_torch.cu")],
            extra_include_paths=[INCLUDE_DIR],
            extra_cuda_cflags=["-O3", "-std=c++17", f"-arch={arch}"],
            is_python_module=False,
            verbose=verbose,
        )
        _ops = torch.ops.replayssm
    return _ops


def _zeros(numel, shape, dtype, device):
    """A zeroed tensor of ``numel`` elements (the library's size helper) viewed as ``shape``."""
    t = torch.zeros(numel, dtype=dtype, device=device)
    return t.view(shape)


def _new_out(shape, device):
    return torch.empty(shape, dtype=torch.bfloat16, device=device)


def mamba2_eager_step(ssm_state, state_indices, x, dt, B, C, A, D=None, z=None, dt_bias=None,
                      dt_softplus=True, out=None, pad_slot_id=PAD_SLOT_ID):
    """The eager baseline: reads, updates and writes each row's state in ``ssm_state``.

    Not to be mixed with the replay ops on the same slots (it ignores their buffered steps).
    """
    if out is None:
        out = _new_out(x.shape, x.device)
    load().mamba2_eager_step(ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                             state_indices, pad_slot_id, out)
    return out


def gdn_eager_step(ssm_state, state_indices, q, k, v, g, beta, scale=0.0, l2norm_qk=True,
                   out=None, pad_slot_id=PAD_SLOT_ID):
    """The eager baseline of Gated DeltaNet (see mamba2_eager_step)."""
    if out is None:
        out = _new_out(v.shape, v.device)
    load().gdn_eager_step(ssm_state, q, k, v, g, beta, scale, l2norm_qk, state_indices,
                          pad_slot_id, out)
    return out


class _WorkspaceUser:
    """The optional fp32 workspace of decode_step and verify_step: with one (the call's
    ``workspace`` argument, else ``self.workspace`` from ``reserve_workspace(max_batch)``, sized
    for both) decode_step runs the split replay step, faster from batch ~64 up and slower below
    (README "Memory" and "Performance"), and verify_step the split verification; without one,
    the fused kernels. Reserve it outside CUDA-graph capture. Layers run one after another on a
    stream may share one: ``other.workspace = cache.workspace``."""

    workspace = None

    def _reserve(self, elems):
        self.workspace = torch.empty(elems, dtype=torch.float32, device=self.ssm_state.device)
        return self.workspace

    def _pick(self, workspace):
        return workspace if workspace is not None else self.workspace


class Mamba2ReplayCache(_WorkspaceUser):
    """One Mamba-2 layer's ReplaySSM cache over the engine's ``ssm_state``.

    ``ssm_state [num_slots, nheads, headdim, dstate]`` fp32 is the engine's tensor (any slot and
    head strides, last dimension contiguous): it holds the checkpoints. This class allocates
    ``buf_x [num_slots, L, nheads, headdim]`` and ``buf_B [num_slots, L, ngroups, dstate]``
    (bf16), ``buf_dt [num_slots, L, nheads]`` fp32 (after dt_bias and softplus), and
    ``cursor``, ``arrivals`` int32 ``[num_slots]`` (zeroed once). The layer weights ``A``,
    ``D``, ``dt_bias`` (fp32 ``[nheads]``) are kept for the calls.
    """

    def __init__(self, ssm_state, ngroups, A, D=None, dt_bias=None, dt_softplus=True):
        ops = load()
        (self.headdim, self.dstate, self.buffer_len, self.commit_interval,
         self.max_draft) = ops.mamba2_policy()
        num_slots, nheads = ssm_state.shape[0], ssm_state.shape[1]
        x_n, B_n, dt_n = ops.mamba2_buffer_elems(num_slots, nheads, ngroups)
        dev, L = ssm_state.device, self.buffer_len
        self.ssm_state = ssm_state
        self.nheads, self.ngroups = nheads, ngroups
        self.A, self.D, self.dt_bias, self.dt_softplus = A, D, dt_bias, dt_softplus
        self.buf_x = _zeros(x_n, (num_slots, L, nheads, self.headdim), torch.bfloat16, dev)
        self.buf_B = _zeros(B_n, (num_slots, L, ngroups, self.dstate), torch.bfloat16, dev)
        self.buf_dt = _zeros(dt_n, (num_slots, L, nheads), torch.float32, dev)
        self.cursor = torch.zeros(num_slots, dtype=torch.int32, device=dev)
        self.arrivals = torch.zeros(num_slots, dtype=torch.int32, device=dev)

    def _buffers(self):
        return self.buf_x, self.buf_B, self.buf_dt, self.cursor, self.arrivals

    def reserve_workspace(self, max_batch):
        """Allocates ``self.workspace`` for up to ``max_batch`` rows of decode_step and of
        verify_step (see _WorkspaceUser)."""
        ops = load()
        return self._reserve(max(ops.mamba2_workspace_elems(max_batch, self.nheads),
                                 ops.mamba2_verify_workspace_elems(max_batch, self.ngroups)))

    def decode_step(self, state_indices, x, dt, B, C, z=None, out=None,
                    pad_slot_id=PAD_SLOT_ID, workspace=None):
        """One decode step: x, z ``[batch, nheads, headdim]``, dt ``[batch, nheads]`` (raw),
        B, C ``[batch, ngroups, dstate]`` (bf16); returns out ``[batch, nheads, headdim]``.
        Writes no state, except a slot whose window fills (every K steps) commits. With a
        workspace (the argument, else ``self.workspace``), the split replay step."""
        if out is None:
            out = _new_out(x.shape, x.device)
        load().mamba2_decode_step(self.ssm_state, x, dt, self.A, B, C, self.D, z, self.dt_bias,
                                  self.dt_softplus, state_indices, pad_slot_id, out,
                                  *self._buffers(), self._pick(workspace))
        return out

    def verify_step(self, state_indices, num_draft, x, dt, B, C, z=None, out=None,
                    pad_slot_id=PAD_SLOT_ID, workspace=None):
        """Speculative verification: inputs and outputs hold ``batch * max_draft`` rows, draft t
        of row b at row ``b * max_draft + t``; row b has ``num_draft[b]`` (int32) drafts. Output
        rows of absent drafts are not written. With a workspace, the split verification."""
        if out is None:
            out = _new_out(x.shape, x.device)
        load().mamba2_verify_step(self.ssm_state, x, dt, self.A, B, C, self.D, z, self.dt_bias,
                                  self.dt_softplus, state_indices, pad_slot_id, num_draft, out,
                                  *self._buffers(), self._pick(workspace))
        return out

    def accept(self, state_indices, accepted, num_draft=None, pad_slot_id=PAD_SLOT_ID):
        """Keeps the first ``accepted[b]`` (int32) drafts of each row's last verification."""
        load().mamba2_accept(self.ssm_state, self.A, state_indices, pad_slot_id, accepted,
                             num_draft, *self._buffers())

    def commit(self, state_indices, pad_slot_id=PAD_SLOT_ID):
        """Folds the listed slots' buffered steps into their checkpoints (cursor 0)."""
        load().mamba2_commit(self.ssm_state, self.A, state_indices, pad_slot_id,
                             *self._buffers())

    def load_state(self, state_indices, src, pad_slot_id=PAD_SLOT_ID):
        """Sets each row's slot from ``src [batch, nheads, headdim, dstate]`` fp32 (e.g. after
        prefill); cursor 0."""
        load().mamba2_load_state(self.ssm_state, src, state_indices, pad_slot_id, self.cursor,
                                 self.arrivals)

    def materialize(self, state_indices, dest=None, pad_slot_id=PAD_SLOT_ID):
        """Returns (or writes into ``dest``) the current state (checkpoint + buffer) of each
        row's slot, ``[batch, nheads, headdim, dstate]`` fp32."""
        if dest is None:
            dest = torch.zeros((state_indices.shape[0],) + tuple(self.ssm_state.shape[1:]),
                               dtype=torch.float32, device=self.ssm_state.device)
        load().mamba2_materialize(self.ssm_state, self.A, state_indices, pad_slot_id,
                                  *self._buffers(), dest)
        return dest


class GatedDeltaNetReplayCache(_WorkspaceUser):
    """One Gated DeltaNet layer's ReplaySSM cache over the engine's ``ssm_state``.

    ``ssm_state [num_slots, num_v_heads, K, V]`` fp32 is the engine's tensor. This class allocates
    ``buf_k [num_slots, L, num_k_heads, K]`` (raw k) and ``buf_v [num_slots, L, num_v_heads, V]``
    (bf16), ``buf_kscale [num_slots, L, num_k_heads]``, ``buf_g``, ``buf_beta
    [num_slots, L, num_v_heads]`` fp32, and ``cursor``, ``arrivals`` int32 ``[num_slots]``.
    q and k are L2-normalised in the kernel (``l2norm_qk``); ``scale`` 0 means K**-0.5.
    """

    def __init__(self, ssm_state, num_k_heads, scale=0.0, l2norm_qk=True):
        ops = load()
        (self.head_k_dim, self.head_v_dim, self.buffer_len, self.commit_interval,
         self.max_draft) = ops.gdn_policy()
        num_slots, num_v_heads = ssm_state.shape[0], ssm_state.shape[1]
        k_n, ks_n, v_n, g_n = ops.gdn_buffer_elems(num_slots, num_k_heads, num_v_heads)
        dev, L = ssm_state.device, self.buffer_len
        self.ssm_state = ssm_state
        self.num_k_heads, self.num_v_heads = num_k_heads, num_v_heads
        self.scale, self.l2norm_qk = scale, l2norm_qk
        self.buf_k = _zeros(k_n, (num_slots, L, num_k_heads, self.head_k_dim), torch.bfloat16, dev)
        self.buf_kscale = _zeros(ks_n, (num_slots, L, num_k_heads), torch.float32, dev)
        self.buf_v = _zeros(v_n, (num_slots, L, num_v_heads, self.head_v_dim), torch.bfloat16, dev)
        self.buf_g = _zeros(g_n, (num_slots, L, num_v_heads), torch.float32, dev)
        self.buf_beta = _zeros(g_n, (num_slots, L, num_v_heads), torch.float32, dev)
        self.cursor = torch.zeros(num_slots, dtype=torch.int32, device=dev)
        self.arrivals = torch.zeros(num_slots, dtype=torch.int32, device=dev)

    def _buffers(self):
        return (self.buf_k, self.buf_kscale, self.buf_v, self.buf_g, self.buf_beta, self.cursor,
                self.arrivals)

    def reserve_workspace(self, max_batch):
        """Allocates ``self.workspace`` for up to ``max_batch`` rows of decode_step and of
        verify_step (see _WorkspaceUser)."""
        ops = load()
        return self._reserve(max(ops.gdn_workspace_elems(max_batch, self.num_v_heads),
                                 ops.gdn_verify_workspace_elems(max_batch, self.num_v_heads)))

    def decode_step(self, state_indices, q, k, v, g, beta, out=None, pad_slot_id=PAD_SLOT_ID,
                    workspace=None):
        """One decode step: q, k ``[batch, num_k_heads, K]``, v ``[batch, num_v_heads, V]``
        (bf16), g (log gate), beta ``[batch, num_v_heads]`` fp32; returns out
        ``[batch, num_v_heads, V]``. With a workspace, the split replay step."""
        if out is None:
            out = _new_out(v.shape, v.device)
        load().gdn_decode_step(self.ssm_state, q, k, v, g, beta, self.scale, self.l2norm_qk,
                               state_indices, pad_slot_id, out, *self._buffers(),
                               self._pick(workspace))
        return out

    def verify_step(self, state_indices, num_draft, q, k, v, g, beta, out=None,
                    pad_slot_id=PAD_SLOT_ID, workspace=None):
        """Speculative verification (rows ``b * max_draft + t``, see Mamba2ReplayCache); with a
        workspace, the split verification."""
        if out is None:
            out = _new_out(v.shape, v.device)
        load().gdn_verify_step(self.ssm_state, q, k, v, g, beta, self.scale, self.l2norm_qk,
                               state_indices, pad_slot_id, num_draft, out, *self._buffers(),
                               self._pick(workspace))
        return out

    def accept(self, state_indices, accepted, num_draft=None, pad_slot_id=PAD_SLOT_ID):
        """Keeps the first ``accepted[b]`` drafts of each row's last verification."""
        load().gdn_accept(self.ssm_state, state_indices, pad_slot_id, accepted, num_draft,
                          *self._buffers())

    def commit(self, state_indices, pad_slot_id=PAD_SLOT_ID):
        """Folds the listed slots' buffered steps into their checkpoints (cursor 0)."""
        load().gdn_commit(self.ssm_state, state_indices, pad_slot_id, *self._buffers())

    def load_state(self, state_indices, src, pad_slot_id=PAD_SLOT_ID):
        """Sets each row's slot from ``src [batch, num_v_heads, K, V]`` fp32; cursor 0."""
        load().gdn_load_state(self.ssm_state, src, state_indices, pad_slot_id, self.cursor,
                              self.arrivals)

    def materialize(self, state_indices, dest=None, pad_slot_id=PAD_SLOT_ID):
        """Returns the current state of each row's slot, ``[batch, num_v_heads, K, V]`` fp32."""
        if dest is None:
            dest = torch.zeros((state_indices.shape[0],) + tuple(self.ssm_state.shape[1:]),
                               dtype=torch.float32, device=self.ssm_state.device)
        load().gdn_materialize(self.ssm_state, state_indices, pad_slot_id, *self._buffers(),
                               dest)
        return dest
