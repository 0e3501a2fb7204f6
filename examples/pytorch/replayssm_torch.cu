// PyTorch binding of ReplaySSM: the Mamba-2 and Gated DeltaNet launchers as torch ops
// (`torch.ops.replayssm.*`) over caches laid out as vLLM lays them out.
//
// One compile-time policy per rule (bf16 activations, fp32 state, L = 32, K = 16, drafts of up
// to 4 tokens); the ops map torch tensors onto the library's views without copies:
//
//   ssm_state [num_slots, H, P, N] fp32 (Mamba-2) / [num_slots, Hv, K, V] fp32 (GDN)
//       -> state_pool_ref{ptr, stride(0), stride(1), stride(2), size(0)}
//   state_indices [batch] int32, pad id (e.g. -1) -> batch_ref{ptr, pad, batch}
//   x, z, out [batch, H, P], B, C [batch, G, N], dt [batch, H] bf16 (any batch/head strides,
//   last dimension contiguous) -> mamba2_inputs pointers and strides
//   q, k [batch, Hk, K], v, out [batch, Hv, V] bf16, g, beta [batch, Hv] fp32 -> gdn_inputs
//   ReplaySSM's buffer and cursor tensors (allocated by replayssm_torch.py) -> the buffer views
//   and cursor_ref (arrivals is an int32 tensor, read as uint32 by the kernels).
//
// Every op launches on torch's current CUDA stream and turns a failed replayssm::result into a
// Python RuntimeError carrying the library's message.
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <replayssm/gated_deltanet.cuh>
#include <replayssm/mamba2.cuh>
#include <string>
#include <vector>

namespace {

namespace rs = replayssm;

using input_t = __nv_bfloat16;       ///< activations and outputs: torch.bfloat16
constexpr int buffer_len = 32;       ///< L: steps each slot's buffer holds
constexpr int commit_interval = 16;  ///< K: a slot commits every K decode steps
constexpr int max_draft = 4;         ///< MaxDraft of verify_step: tokens per row and round

/// Mamba-2: headdim 64, dstate 128, bf16 inputs, fp32 checkpoint.
using mamba2_policy =
    rs::replay_policy<rs::rules::mamba2<64, 128, input_t>, buffer_len, commit_interval>;
/// Gated DeltaNet: K = V = 128, bf16 inputs, state [Hv, K, V] (flash-linear-attention layout).
using gdn_policy =
    rs::replay_policy<rs::rules::gated_deltanet<128, 128, input_t>, buffer_len, commit_interval>;
using mamba2_params = rs::mamba2_params<mamba2_policy>;
using gdn_params = rs::gdn_params<gdn_policy>;

constexpr int headdim = mamba2_policy::rule::headdim;
constexpr int dstate = mamba2_policy::rule::dstate;
constexpr int head_k_dim = gdn_policy::rule::head_k_dim;
constexpr int head_v_dim = gdn_policy::rule::head_v_dim;

// ---------------------------------------------------------------------------------------------
// Checks and conversions
// ---------------------------------------------------------------------------------------------

/// Throws (RuntimeError in Python) unless a launcher succeeded, with the library's message.
void check_result(const rs::result& r, const char* op) {
  TORCH_CHECK(r.ok(), std::string("replayssm.") + op + ": " + rs::to_string(r.code) + ": " +
                          (r.message ? r.message : ""));
}

/// "[a, b, *]" for sizes (-1: any). Messages are built with std::string only: the extension's
/// own iostream instantiations (torch builds it with its own g++) crashed on the lent machine.
std::string shape_string(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    s += (i ? ", " : "") + (sizes[i] < 0 ? std::string("*") : std::to_string(sizes[i]));
  return s + "]";
}

/// Checks device, dtype and sizes (-1: any) of a tensor and that its last dimension is
/// contiguous; other strides are passed to the library, which checks them.
void check_tensor(const at::Tensor& t, const char* name, const at::Device& device,
                  at::ScalarType dtype, std::initializer_list<int64_t> sizes) {
  const std::string n = std::string("replayssm: ") + name;
  TORCH_CHECK(t.defined(), n + " is undefined");
  TORCH_CHECK(t.device() == device, n + " must be on " + device.str() +
                                        " (the state cache's device), got " + t.device().str());
  TORCH_CHECK(t.scalar_type() == dtype,
              n + " must be " + c10::toString(dtype) + ", got " + c10::toString(t.scalar_type()));
  bool same = t.dim() == int64_t(sizes.size());
  int64_t d = 0;
  for (int64_t v : sizes) {
    same = same && (v < 0 || t.size(d) == v);
    ++d;
  }
  TORCH_CHECK(same,
              n + " must have shape " + shape_string(sizes) + ", got " + shape_string(t.sizes()));
  TORCH_CHECK(t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1,
              n + " must be contiguous in its last dimension");
}

/// check_tensor, and the whole tensor contiguous (ReplaySSM's own buffers and 1-D index arrays).
void check_dense(const at::Tensor& t, const char* name, const at::Device& device,
                 at::ScalarType dtype, std::initializer_list<int64_t> sizes) {
  check_tensor(t, name, device, dtype, sizes);
  TORCH_CHECK(t.is_contiguous(), std::string("replayssm: ") + name + " must be contiguous");
}

/// A tensor's sizes fit the library's 32-bit counts.
int32_t to_i32(int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= INT32_MAX,
              std::string("replayssm: ") + what + " out of range: " + std::to_string(v));
  return int32_t(v);
}

/// The optional fp32 workspace of decode_step (the split replay step, README "Memory"): any
/// contiguous float32 tensor on the cache's device; the library refuses one smaller than
/// workspace_elems(batch, heads) of the launch. None: the fused kernel.
template <class Params>
void set_workspace(Params& p, const std::optional<at::Tensor>& workspace,
                   const at::Device& device) {
  if (!workspace) return;
  check_dense(*workspace, "workspace", device, at::kFloat, {-1});
  p.workspace = workspace->data_ptr<float>();
  p.workspace_size = workspace->numel();
}

const input_t* bf16_in(const at::Tensor& t) {
  return reinterpret_cast<const input_t*>(t.data_ptr<at::BFloat16>());
}
input_t* bf16_out(const at::Tensor& t) {
  return reinterpret_cast<input_t*>(t.data_ptr<at::BFloat16>());
}

/// The fp32 state pool `[slots, heads, rows, cols]` as a state_pool_ref (strides in elements).
rs::state_pool_ref pool_ref(const at::Tensor& t) {
  return {t.data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2),
          to_i32(t.size(0), "number of slots")};
}

/// Which slot each batch row uses (`state_indices`, int32 [batch]; pad_slot_id marks padding).
rs::batch_ref rows_ref(const at::Tensor& state_indices, int64_t pad_slot_id,
                       const at::Device& device) {
  check_dense(state_indices, "state_indices", device, at::kInt, {-1});
  TORCH_CHECK(pad_slot_id >= INT32_MIN && pad_slot_id <= INT32_MAX,
              "replayssm: pad_slot_id must fit in int32");
  return {state_indices.data_ptr<int32_t>(), int32_t(pad_slot_id),
          to_i32(state_indices.size(0), "batch")};
}

/// cursor and arrivals, int32 [num_slots] each (arrivals zeroed once; uint32 to the kernels).
rs::cursor_ref cursors_ref(const at::Tensor& cursor, const at::Tensor& arrivals, int64_t num_slots,
                           const at::Device& device) {
  check_dense(cursor, "cursor", device, at::kInt, {num_slots});
  check_dense(arrivals, "arrivals", device, at::kInt, {num_slots});
  return {cursor.data_ptr<int32_t>(), reinterpret_cast<uint32_t*>(arrivals.data_ptr<int32_t>())};
}

/// An optional per-row int32 array `[batch]` (nullptr when absent).
const int32_t* rows_array(const std::optional<at::Tensor>& t, const char* name, int64_t batch,
                          const at::Device& device) {
  if (!t.has_value()) return nullptr;
  check_dense(*t, name, device, at::kInt, {batch});
  return t->data_ptr<int32_t>();
}

/// The device of the state cache, which every other tensor of a call must share.
at::Device cuda_device(const at::Tensor& ssm_state) {
  TORCH_CHECK(ssm_state.is_cuda(),
              "replayssm: ssm_state must be a CUDA tensor, got " + ssm_state.device().str());
  return ssm_state.device();
}

/// Torch's current stream on that device: every launch goes there.
cudaStream_t current_stream(const at::Device& device) {
  return at::cuda::getCurrentCUDAStream(device.index()).stream();
}

// ---------------------------------------------------------------------------------------------
// Mamba-2
// ---------------------------------------------------------------------------------------------

/// Params over the cache: the state pool `[slots, H, P, N]` and the batch rows. `ngroups` comes
/// from B (or the buffer) and is set by the callers.
mamba2_params mamba2_base(const at::Tensor& ssm_state, const at::Tensor& state_indices,
                          int64_t pad_slot_id) {
  const at::Device device = cuda_device(ssm_state);
  check_tensor(ssm_state, "ssm_state", device, at::kFloat, {-1, -1, headdim, dstate});
  mamba2_params p;
  p.nheads = to_i32(ssm_state.size(1), "nheads");
  p.headdim = headdim;
  p.dstate = dstate;
  p.state = pool_ref(ssm_state);
  p.rows = rows_ref(state_indices, pad_slot_id, device);
  return p;
}

/// A, D, dt_bias fp32 `[nheads]` (D and dt_bias optional).
void set_mamba2_weights(mamba2_params& p, const at::Tensor& A, const std::optional<at::Tensor>& D,
                        const std::optional<at::Tensor>& dt_bias, bool dt_softplus,
                        const at::Device& device) {
  check_dense(A, "A", device, at::kFloat, {p.nheads});
  p.weights.A = A.data_ptr<float>();
  if (D.has_value()) {
    check_dense(*D, "D", device, at::kFloat, {p.nheads});
    p.weights.D = D->data_ptr<float>();
  }
  if (dt_bias.has_value()) {
    check_dense(*dt_bias, "dt_bias", device, at::kFloat, {p.nheads});
    p.weights.dt_bias = dt_bias->data_ptr<float>();
  }
  p.weights.dt_softplus = dt_softplus;
}

/// The step inputs and the output, `rows` rows (batch, or batch * max_draft for verify_step).
/// Sets p.ngroups from B when no buffer set it.
void set_mamba2_step(mamba2_params& p, const at::Tensor& x, const at::Tensor& dt,
                     const at::Tensor& B, const at::Tensor& C, const std::optional<at::Tensor>& z,
                     const at::Tensor& out, int64_t rows, const at::Device& device) {
  const int64_t H = p.nheads;
  TORCH_CHECK(B.dim() == 3, "replayssm: B must have shape [rows, ngroups, dstate]");
  const int64_t G = p.ngroups > 0 ? p.ngroups : B.size(1);
  check_tensor(x, "x", device, at::kBFloat16, {rows, H, headdim});
  check_tensor(dt, "dt", device, at::kBFloat16, {rows, H});
  check_tensor(B, "B", device, at::kBFloat16, {rows, G, dstate});
  check_tensor(C, "C", device, at::kBFloat16, {rows, G, dstate});
  check_tensor(out, "out", device, at::kBFloat16, {rows, H, headdim});
  p.ngroups = to_i32(G, "ngroups");
  auto& in = p.in;
  in.x = bf16_in(x), in.x_batch_stride = x.stride(0), in.x_head_stride = x.stride(1);
  in.dt = bf16_in(dt), in.dt_batch_stride = dt.stride(0), in.dt_head_stride = dt.stride(1);
  in.B = bf16_in(B), in.B_batch_stride = B.stride(0), in.B_group_stride = B.stride(1);
  in.C = bf16_in(C), in.C_batch_stride = C.stride(0), in.C_group_stride = C.stride(1);
  if (z.has_value()) {
    check_tensor(*z, "z", device, at::kBFloat16, {rows, H, headdim});
    in.z = bf16_in(*z), in.z_batch_stride = z->stride(0), in.z_head_stride = z->stride(1);
  }
  in.out = bf16_out(out), in.out_batch_stride = out.stride(0), in.out_head_stride = out.stride(1);
}

/// ReplaySSM's buffer `x [slots, L, H, P]`, `B [slots, L, G, N]` bf16, `dt [slots, L, H]` fp32,
/// and the cursors; sets p.ngroups from the buffer.
void set_mamba2_buffer(mamba2_params& p, const at::Tensor& buf_x, const at::Tensor& buf_B,
                       const at::Tensor& buf_dt, const at::Tensor& cursor,
                       const at::Tensor& arrivals, const at::Device& device) {
  const int64_t S = p.state.num_slots, H = p.nheads;
  TORCH_CHECK(buf_B.dim() == 4, "replayssm: buf_B must have shape [slots, L, ngroups, dstate]");
  p.ngroups = to_i32(buf_B.size(2), "ngroups");
  check_dense(buf_x, "buf_x", device, at::kBFloat16, {S, buffer_len, H, headdim});
  check_dense(buf_B, "buf_B", device, at::kBFloat16, {S, buffer_len, p.ngroups, dstate});
  check_dense(buf_dt, "buf_dt", device, at::kFloat, {S, buffer_len, H});
  p.buffer = {bf16_out(buf_x), bf16_out(buf_B), buf_dt.data_ptr<float>()};
  p.cursors = cursors_ref(cursor, arrivals, S, device);
}

/// Eager step (the baseline): reads, updates and writes each row's state; no buffer.
void mamba2_eager_step(const at::Tensor& ssm_state, const at::Tensor& x, const at::Tensor& dt,
                       const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                       const std::optional<at::Tensor>& D, const std::optional<at::Tensor>& z,
                       const std::optional<at::Tensor>& dt_bias, bool dt_softplus,
                       const at::Tensor& state_indices, int64_t pad_slot_id,
                       const at::Tensor& out) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_weights(p, A, D, dt_bias, dt_softplus, device);
  set_mamba2_step(p, x, dt, B, C, z, out, p.rows.batch, device);
  check_result(rs::eager_step(p, current_stream(device)), "mamba2_eager_step");
}

/// Replay decode step: output from checkpoint + buffer, the step appended; commits every K.
void mamba2_decode_step(const at::Tensor& ssm_state, const at::Tensor& x, const at::Tensor& dt,
                        const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                        const std::optional<at::Tensor>& D, const std::optional<at::Tensor>& z,
                        const std::optional<at::Tensor>& dt_bias, bool dt_softplus,
                        const at::Tensor& state_indices, int64_t pad_slot_id, const at::Tensor& out,
                        const at::Tensor& buf_x, const at::Tensor& buf_B, const at::Tensor& buf_dt,
                        const at::Tensor& cursor, const at::Tensor& arrivals,
                        const std::optional<at::Tensor>& workspace) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_buffer(p, buf_x, buf_B, buf_dt, cursor, arrivals, device);
  set_mamba2_weights(p, A, D, dt_bias, dt_softplus, device);
  set_mamba2_step(p, x, dt, B, C, z, out, p.rows.batch, device);
  set_workspace(p, workspace, device);
  check_result(rs::decode_step(p, current_stream(device)), "mamba2_decode_step");
}

/// Speculative verification: outputs of each row's num_draft[b] drafts (rows b * max_draft + t).
void mamba2_verify_step(const at::Tensor& ssm_state, const at::Tensor& x, const at::Tensor& dt,
                        const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                        const std::optional<at::Tensor>& D, const std::optional<at::Tensor>& z,
                        const std::optional<at::Tensor>& dt_bias, bool dt_softplus,
                        const at::Tensor& state_indices, int64_t pad_slot_id,
                        const at::Tensor& num_draft, const at::Tensor& out, const at::Tensor& buf_x,
                        const at::Tensor& buf_B, const at::Tensor& buf_dt, const at::Tensor& cursor,
                        const at::Tensor& arrivals, const std::optional<at::Tensor>& workspace) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_buffer(p, buf_x, buf_B, buf_dt, cursor, arrivals, device);
  set_mamba2_weights(p, A, D, dt_bias, dt_softplus, device);
  set_mamba2_step(p, x, dt, B, C, z, out, int64_t(p.rows.batch) * max_draft, device);
  p.spec.num_draft = rows_array(num_draft, "num_draft", p.rows.batch, device);
  set_workspace(p, workspace, device);  // the split verification (README "Speculative decoding")
  check_result(rs::verify_step<max_draft>(p, current_stream(device)), "mamba2_verify_step");
}

/// Keeps the first accepted[b] drafts of each row's last verification.
void mamba2_accept(const at::Tensor& ssm_state, const at::Tensor& A,
                   const at::Tensor& state_indices, int64_t pad_slot_id, const at::Tensor& accepted,
                   const std::optional<at::Tensor>& num_draft, const at::Tensor& buf_x,
                   const at::Tensor& buf_B, const at::Tensor& buf_dt, const at::Tensor& cursor,
                   const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_buffer(p, buf_x, buf_B, buf_dt, cursor, arrivals, device);
  set_mamba2_weights(p, A, std::nullopt, std::nullopt, true, device);
  p.spec.accepted = rows_array(accepted, "accepted", p.rows.batch, device);
  p.spec.num_draft = rows_array(num_draft, "num_draft", p.rows.batch, device);
  check_result(rs::accept(p, current_stream(device)), "mamba2_accept");
}

/// Commit (flush): folds each listed slot's buffered steps into its checkpoint, cursor 0.
void mamba2_commit(const at::Tensor& ssm_state, const at::Tensor& A,
                   const at::Tensor& state_indices, int64_t pad_slot_id, const at::Tensor& buf_x,
                   const at::Tensor& buf_B, const at::Tensor& buf_dt, const at::Tensor& cursor,
                   const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_buffer(p, buf_x, buf_B, buf_dt, cursor, arrivals, device);
  set_mamba2_weights(p, A, std::nullopt, std::nullopt, true, device);
  check_result(rs::commit(p, current_stream(device)), "mamba2_commit");
}

/// Sets each row's slot checkpoint from src row b (`[batch, H, P, N]` fp32), cursor 0.
void mamba2_load_state(const at::Tensor& ssm_state, const at::Tensor& src,
                       const at::Tensor& state_indices, int64_t pad_slot_id,
                       const at::Tensor& cursor, const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  p.ngroups = 1;  // a load reads no B: any divisor of nheads passes the checks
  p.cursors = cursors_ref(cursor, arrivals, p.state.num_slots, device);
  check_tensor(src, "src", device, at::kFloat, {p.rows.batch, p.nheads, headdim, dstate});
  check_result(rs::load_state(p, pool_ref(src), current_stream(device)), "mamba2_load_state");
}

/// Writes checkpoint + buffer (the current state) of each row's slot to dest row b.
void mamba2_materialize(const at::Tensor& ssm_state, const at::Tensor& A,
                        const at::Tensor& state_indices, int64_t pad_slot_id,
                        const at::Tensor& buf_x, const at::Tensor& buf_B, const at::Tensor& buf_dt,
                        const at::Tensor& cursor, const at::Tensor& arrivals,
                        const at::Tensor& dest) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  mamba2_params p = mamba2_base(ssm_state, state_indices, pad_slot_id);
  set_mamba2_buffer(p, buf_x, buf_B, buf_dt, cursor, arrivals, device);
  set_mamba2_weights(p, A, std::nullopt, std::nullopt, true, device);
  check_tensor(dest, "dest", device, at::kFloat, {p.rows.batch, p.nheads, headdim, dstate});
  check_result(rs::materialize(p, pool_ref(dest), current_stream(device)), "mamba2_materialize");
}

/// [headdim, dstate, buffer_len, commit_interval, max_draft] of the compiled policy.
std::vector<int64_t> mamba2_policy_info() {
  return {headdim, dstate, buffer_len, commit_interval, max_draft};
}

/// Elements of the buffer's x, B and dt for a pool (the library's size helpers).
std::vector<int64_t> mamba2_buffer_elems(int64_t num_slots, int64_t nheads, int64_t ngroups) {
  using buf = rs::mamba2_buffer_ref<input_t>;
  return {buf::x_elems(num_slots, buffer_len, int(nheads), headdim),
          buf::B_elems(num_slots, buffer_len, int(ngroups), dstate),
          buf::dt_elems(num_slots, buffer_len, int(nheads))};
}

/// Floats of decode_step's workspace for `batch` rows (the library's size helper).
int64_t mamba2_workspace_elems(int64_t batch, int64_t nheads) {
  return mamba2_params::workspace_elems(batch, to_i32(nheads, "nheads"));
}

/// Floats of verify_step's workspace for `batch` rows (the library's size helper).
int64_t mamba2_verify_workspace_elems(int64_t batch, int64_t ngroups) {
  return mamba2_params::verify_workspace_elems(batch, to_i32(ngroups, "ngroups"), max_draft);
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet
// ---------------------------------------------------------------------------------------------

/// Params over the cache: the state pool `[slots, Hv, K, V]` and the batch rows. num_k_heads
/// comes from q/k (or the buffer) and is set by the callers.
gdn_params gdn_base(const at::Tensor& ssm_state, const at::Tensor& state_indices,
                    int64_t pad_slot_id) {
  const at::Device device = cuda_device(ssm_state);
  check_tensor(ssm_state, "ssm_state", device, at::kFloat, {-1, -1, head_k_dim, head_v_dim});
  gdn_params p;
  p.num_v_heads = to_i32(ssm_state.size(1), "num_v_heads");
  p.head_k_dim = head_k_dim;
  p.head_v_dim = head_v_dim;
  p.state = pool_ref(ssm_state);
  p.rows = rows_ref(state_indices, pad_slot_id, device);
  return p;
}

/// The step inputs and the output, `rows` rows; sets p.num_k_heads from q when no buffer did.
void set_gdn_step(gdn_params& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& g, const at::Tensor& beta, double scale, bool l2norm_qk,
                  const at::Tensor& out, int64_t rows, const at::Device& device) {
  const int64_t Hv = p.num_v_heads;
  TORCH_CHECK(q.dim() == 3, "replayssm: q must have shape [rows, num_k_heads, head_k_dim]");
  const int64_t Hk = p.num_k_heads > 0 ? p.num_k_heads : q.size(1);
  check_tensor(q, "q", device, at::kBFloat16, {rows, Hk, head_k_dim});
  check_tensor(k, "k", device, at::kBFloat16, {rows, Hk, head_k_dim});
  check_tensor(v, "v", device, at::kBFloat16, {rows, Hv, head_v_dim});
  check_tensor(g, "g", device, at::kFloat, {rows, Hv});
  check_tensor(beta, "beta", device, at::kFloat, {rows, Hv});
  check_tensor(out, "out", device, at::kBFloat16, {rows, Hv, head_v_dim});
  p.num_k_heads = to_i32(Hk, "num_k_heads");
  p.scale = float(scale);
  p.l2norm_qk = l2norm_qk;
  auto& in = p.in;
  in.q = bf16_in(q), in.q_batch_stride = q.stride(0), in.q_head_stride = q.stride(1);
  in.k = bf16_in(k), in.k_batch_stride = k.stride(0), in.k_head_stride = k.stride(1);
  in.v = bf16_in(v), in.v_batch_stride = v.stride(0), in.v_head_stride = v.stride(1);
  in.g = g.data_ptr<float>(), in.g_batch_stride = g.stride(0);
  in.beta = beta.data_ptr<float>(), in.beta_batch_stride = beta.stride(0);
  in.out = bf16_out(out), in.out_batch_stride = out.stride(0), in.out_head_stride = out.stride(1);
}

/// ReplaySSM's buffer `k [slots, L, Hk, K]` bf16, `kscale [slots, L, Hk]` fp32,
/// `v [slots, L, Hv, V]` bf16, `g`, `beta [slots, L, Hv]` fp32, and the cursors; sets
/// p.num_k_heads from the buffer.
void set_gdn_buffer(gdn_params& p, const at::Tensor& buf_k, const at::Tensor& buf_kscale,
                    const at::Tensor& buf_v, const at::Tensor& buf_g, const at::Tensor& buf_beta,
                    const at::Tensor& cursor, const at::Tensor& arrivals,
                    const at::Device& device) {
  const int64_t S = p.state.num_slots, Hv = p.num_v_heads;
  TORCH_CHECK(buf_k.dim() == 4, "replayssm: buf_k must have shape [slots, L, num_k_heads, K]");
  p.num_k_heads = to_i32(buf_k.size(2), "num_k_heads");
  const int64_t Hk = p.num_k_heads;
  check_dense(buf_k, "buf_k", device, at::kBFloat16, {S, buffer_len, Hk, head_k_dim});
  check_dense(buf_kscale, "buf_kscale", device, at::kFloat, {S, buffer_len, Hk});
  check_dense(buf_v, "buf_v", device, at::kBFloat16, {S, buffer_len, Hv, head_v_dim});
  check_dense(buf_g, "buf_g", device, at::kFloat, {S, buffer_len, Hv});
  check_dense(buf_beta, "buf_beta", device, at::kFloat, {S, buffer_len, Hv});
  p.buffer = {bf16_out(buf_k), buf_kscale.data_ptr<float>(), bf16_out(buf_v),
              buf_g.data_ptr<float>(), buf_beta.data_ptr<float>()};
  p.cursors = cursors_ref(cursor, arrivals, S, device);
}

/// Eager step (the baseline): reads, updates and writes each row's state; no buffer.
void gdn_eager_step(const at::Tensor& ssm_state, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta, double scale,
                    bool l2norm_qk, const at::Tensor& state_indices, int64_t pad_slot_id,
                    const at::Tensor& out) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_step(p, q, k, v, g, beta, scale, l2norm_qk, out, p.rows.batch, device);
  check_result(rs::eager_step(p, current_stream(device)), "gdn_eager_step");
}

/// Replay decode step: output by the backward sweep over the buffer; commits every K.
void gdn_decode_step(const at::Tensor& ssm_state, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta, double scale,
                     bool l2norm_qk, const at::Tensor& state_indices, int64_t pad_slot_id,
                     const at::Tensor& out, const at::Tensor& buf_k, const at::Tensor& buf_kscale,
                     const at::Tensor& buf_v, const at::Tensor& buf_g, const at::Tensor& buf_beta,
                     const at::Tensor& cursor, const at::Tensor& arrivals,
                     const std::optional<at::Tensor>& workspace) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_buffer(p, buf_k, buf_kscale, buf_v, buf_g, buf_beta, cursor, arrivals, device);
  set_gdn_step(p, q, k, v, g, beta, scale, l2norm_qk, out, p.rows.batch, device);
  set_workspace(p, workspace, device);
  check_result(rs::decode_step(p, current_stream(device)), "gdn_decode_step");
}

/// Speculative verification: outputs of each row's num_draft[b] drafts (rows b * max_draft + t).
void gdn_verify_step(const at::Tensor& ssm_state, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta, double scale,
                     bool l2norm_qk, const at::Tensor& state_indices, int64_t pad_slot_id,
                     const at::Tensor& num_draft, const at::Tensor& out, const at::Tensor& buf_k,
                     const at::Tensor& buf_kscale, const at::Tensor& buf_v, const at::Tensor& buf_g,
                     const at::Tensor& buf_beta, const at::Tensor& cursor,
                     const at::Tensor& arrivals, const std::optional<at::Tensor>& workspace) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_buffer(p, buf_k, buf_kscale, buf_v, buf_g, buf_beta, cursor, arrivals, device);
  set_gdn_step(p, q, k, v, g, beta, scale, l2norm_qk, out, int64_t(p.rows.batch) * max_draft,
               device);
  p.spec.num_draft = rows_array(num_draft, "num_draft", p.rows.batch, device);
  set_workspace(p, workspace, device);  // the split verification (README "Speculative decoding")
  check_result(rs::verify_step<max_draft>(p, current_stream(device)), "gdn_verify_step");
}

/// Keeps the first accepted[b] drafts of each row's last verification.
void gdn_accept(const at::Tensor& ssm_state, const at::Tensor& state_indices, int64_t pad_slot_id,
                const at::Tensor& accepted, const std::optional<at::Tensor>& num_draft,
                const at::Tensor& buf_k, const at::Tensor& buf_kscale, const at::Tensor& buf_v,
                const at::Tensor& buf_g, const at::Tensor& buf_beta, const at::Tensor& cursor,
                const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_buffer(p, buf_k, buf_kscale, buf_v, buf_g, buf_beta, cursor, arrivals, device);
  p.spec.accepted = rows_array(accepted, "accepted", p.rows.batch, device);
  p.spec.num_draft = rows_array(num_draft, "num_draft", p.rows.batch, device);
  check_result(rs::accept(p, current_stream(device)), "gdn_accept");
}

/// Commit (flush): folds each listed slot's buffered steps into its checkpoint, cursor 0.
void gdn_commit(const at::Tensor& ssm_state, const at::Tensor& state_indices, int64_t pad_slot_id,
                const at::Tensor& buf_k, const at::Tensor& buf_kscale, const at::Tensor& buf_v,
                const at::Tensor& buf_g, const at::Tensor& buf_beta, const at::Tensor& cursor,
                const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_buffer(p, buf_k, buf_kscale, buf_v, buf_g, buf_beta, cursor, arrivals, device);
  check_result(rs::commit(p, current_stream(device)), "gdn_commit");
}

/// Sets each row's slot checkpoint from src row b (`[batch, Hv, K, V]` fp32), cursor 0.
void gdn_load_state(const at::Tensor& ssm_state, const at::Tensor& src,
                    const at::Tensor& state_indices, int64_t pad_slot_id, const at::Tensor& cursor,
                    const at::Tensor& arrivals) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  p.num_k_heads = 1;  // a load reads no k: any divisor of num_v_heads passes the checks
  p.cursors = cursors_ref(cursor, arrivals, p.state.num_slots, device);
  check_tensor(src, "src", device, at::kFloat,
               {p.rows.batch, p.num_v_heads, head_k_dim, head_v_dim});
  check_result(rs::load_state(p, pool_ref(src), current_stream(device)), "gdn_load_state");
}

/// Writes checkpoint + buffer (the current state) of each row's slot to dest row b.
void gdn_materialize(const at::Tensor& ssm_state, const at::Tensor& state_indices,
                     int64_t pad_slot_id, const at::Tensor& buf_k, const at::Tensor& buf_kscale,
                     const at::Tensor& buf_v, const at::Tensor& buf_g, const at::Tensor& buf_beta,
                     const at::Tensor& cursor, const at::Tensor& arrivals, const at::Tensor& dest) {
  const at::Device device = cuda_device(ssm_state);
  const c10::cuda::CUDAGuard guard(device);
  gdn_params p = gdn_base(ssm_state, state_indices, pad_slot_id);
  set_gdn_buffer(p, buf_k, buf_kscale, buf_v, buf_g, buf_beta, cursor, arrivals, device);
  check_tensor(dest, "dest", device, at::kFloat,
               {p.rows.batch, p.num_v_heads, head_k_dim, head_v_dim});
  check_result(rs::materialize(p, pool_ref(dest), current_stream(device)), "gdn_materialize");
}

/// Floats of decode_step's workspace for `batch` rows (the library's size helper).
int64_t gdn_workspace_elems(int64_t batch, int64_t num_v_heads) {
  return gdn_params::workspace_elems(batch, to_i32(num_v_heads, "num_v_heads"));
}

/// Floats of verify_step's workspace for `batch` rows (the library's size helper).
int64_t gdn_verify_workspace_elems(int64_t batch, int64_t num_v_heads) {
  return gdn_params::verify_workspace_elems(batch, to_i32(num_v_heads, "num_v_heads"),
                                            max_draft);
}

/// [head_k_dim, head_v_dim, buffer_len, commit_interval, max_draft] of the compiled policy.
std::vector<int64_t> gdn_policy_info() {
  return {head_k_dim, head_v_dim, buffer_len, commit_interval, max_draft};
}

/// Elements of the buffer's k, kscale, v and g (= beta) for a pool (the library's size helpers).
std::vector<int64_t> gdn_buffer_elems(int64_t num_slots, int64_t num_k_heads, int64_t num_v_heads) {
  using buf = rs::gdn_buffer_ref<input_t>;
  return {buf::k_elems(num_slots, buffer_len, int(num_k_heads), head_k_dim),
          buf::kscale_elems(num_slots, buffer_len, int(num_k_heads)),
          buf::v_elems(num_slots, buffer_len, int(num_v_heads), head_v_dim),
          buf::gate_elems(num_slots, buffer_len, int(num_v_heads))};
}

}  // namespace

// Schemas: `Tensor(x!)` marks what an op writes (torch.compile and CUDA graphs see the effects).
TORCH_LIBRARY(replayssm, m) {
  m.def("mamba2_policy() -> int[]", &mamba2_policy_info);
  m.def("mamba2_buffer_elems(int num_slots, int nheads, int ngroups) -> int[]",
        &mamba2_buffer_elems);
  m.def(
      "mamba2_eager_step(Tensor(a!) ssm_state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, "
      "Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, Tensor state_indices, "
      "int pad_slot_id, Tensor(b!) out) -> ()");
  m.def(
      "mamba2_decode_step(Tensor(a!) ssm_state, Tensor x, Tensor dt, Tensor A, Tensor B, "
      "Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, Tensor state_indices, "
      "int pad_slot_id, Tensor(b!) out, Tensor(c!) buf_x, Tensor(d!) buf_B, Tensor(e!) buf_dt, "
      "Tensor(f!) cursor, Tensor(g!) arrivals, Tensor(h!)? workspace=None) -> ()");
  m.def("mamba2_workspace_elems(int batch, int nheads) -> int", &mamba2_workspace_elems);
  m.def(
      "mamba2_verify_step(Tensor(a!) ssm_state, Tensor x, Tensor dt, Tensor A, Tensor B, "
      "Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, Tensor state_indices, "
      "int pad_slot_id, Tensor num_draft, Tensor(b!) out, Tensor(c!) buf_x, Tensor(d!) buf_B, "
      "Tensor(e!) buf_dt, Tensor(f!) cursor, Tensor(g!) arrivals, "
      "Tensor(h!)? workspace=None) -> ()");
  m.def("mamba2_verify_workspace_elems(int batch, int ngroups) -> int",
        &mamba2_verify_workspace_elems);
  m.def(
      "mamba2_accept(Tensor(a!) ssm_state, Tensor A, Tensor state_indices, int pad_slot_id, "
      "Tensor accepted, Tensor? num_draft, Tensor(b!) buf_x, Tensor(c!) buf_B, "
      "Tensor(d!) buf_dt, Tensor(e!) cursor, Tensor(f!) arrivals) -> ()");
  m.def(
      "mamba2_commit(Tensor(a!) ssm_state, Tensor A, Tensor state_indices, int pad_slot_id, "
      "Tensor buf_x, Tensor buf_B, Tensor buf_dt, Tensor(b!) cursor, Tensor(c!) arrivals) -> ()");
  m.def(
      "mamba2_load_state(Tensor(a!) ssm_state, Tensor src, Tensor state_indices, "
      "int pad_slot_id, Tensor(b!) cursor, Tensor arrivals) -> ()");
  m.def(
      "mamba2_materialize(Tensor ssm_state, Tensor A, Tensor state_indices, int pad_slot_id, "
      "Tensor buf_x, Tensor buf_B, Tensor buf_dt, Tensor cursor, Tensor arrivals, "
      "Tensor(a!) dest) -> ()");

  m.def("gdn_policy() -> int[]", &gdn_policy_info);
  m.def("gdn_buffer_elems(int num_slots, int num_k_heads, int num_v_heads) -> int[]",
        &gdn_buffer_elems);
  m.def(
      "gdn_eager_step(Tensor(a!) ssm_state, Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, "
      "float scale, bool l2norm_qk, Tensor state_indices, int pad_slot_id, Tensor(b!) out) -> ()");
  m.def(
      "gdn_decode_step(Tensor(a!) ssm_state, Tensor q, Tensor k, Tensor v, Tensor g, "
      "Tensor beta, float scale, bool l2norm_qk, Tensor state_indices, int pad_slot_id, "
      "Tensor(b!) out, Tensor(c!) buf_k, Tensor(d!) buf_kscale, Tensor(e!) buf_v, "
      "Tensor(f!) buf_g, Tensor(g!) buf_beta, Tensor(h!) cursor, Tensor(i!) arrivals, "
      "Tensor(j!)? workspace=None) -> ()");
  m.def("gdn_workspace_elems(int batch, int num_v_heads) -> int", &gdn_workspace_elems);
  m.def(
      "gdn_verify_step(Tensor(a!) ssm_state, Tensor q, Tensor k, Tensor v, Tensor g, "
      "Tensor beta, float scale, bool l2norm_qk, Tensor state_indices, int pad_slot_id, "
      "Tensor num_draft, Tensor(b!) out, Tensor(c!) buf_k, Tensor(d!) buf_kscale, "
      "Tensor(e!) buf_v, Tensor(f!) buf_g, Tensor(g!) buf_beta, Tensor(h!) cursor, "
      "Tensor(i!) arrivals, Tensor(j!)? workspace=None) -> ()");
  m.def("gdn_verify_workspace_elems(int batch, int num_v_heads) -> int",
        &gdn_verify_workspace_elems);
  m.def(
      "gdn_accept(Tensor(a!) ssm_state, Tensor state_indices, int pad_slot_id, Tensor accepted, "
      "Tensor? num_draft, Tensor(b!) buf_k, Tensor(c!) buf_kscale, Tensor(d!) buf_v, "
      "Tensor(e!) buf_g, Tensor(f!) buf_beta, Tensor(g!) cursor, Tensor(h!) arrivals) -> ()");
  m.def(
      "gdn_commit(Tensor(a!) ssm_state, Tensor state_indices, int pad_slot_id, Tensor buf_k, "
      "Tensor buf_kscale, Tensor buf_v, Tensor buf_g, Tensor buf_beta, Tensor(b!) cursor, "
      "Tensor(c!) arrivals) -> ()");
  m.def(
      "gdn_load_state(Tensor(a!) ssm_state, Tensor src, Tensor state_indices, int pad_slot_id, "
      "Tensor(b!) cursor, Tensor arrivals) -> ()");
  m.def(
      "gdn_materialize(Tensor ssm_state, Tensor state_indices, int pad_slot_id, Tensor buf_k, "
      "Tensor buf_kscale, Tensor buf_v, Tensor buf_g, Tensor buf_beta, Tensor cursor, "
      "Tensor arrivals, Tensor(a!) dest) -> ()");
}

TORCH_LIBRARY_IMPL(replayssm, CUDA, m) {
  m.impl("mamba2_eager_step", &mamba2_eager_step);
  m.impl("mamba2_decode_step", &mamba2_decode_step);
  m.impl("mamba2_verify_step", &mamba2_verify_step);
  m.impl("mamba2_accept", &mamba2_accept);
  m.impl("mamba2_commit", &mamba2_commit);
  m.impl("mamba2_load_state", &mamba2_load_state);
  m.impl("mamba2_materialize", &mamba2_materialize);
  m.impl("gdn_eager_step", &gdn_eager_step);
  m.impl("gdn_decode_step", &gdn_decode_step);
  m.impl("gdn_verify_step", &gdn_verify_step);
  m.impl("gdn_accept", &gdn_accept);
  m.impl("gdn_commit", &gdn_commit);
  m.impl("gdn_load_state", &gdn_load_state);
  m.impl("gdn_materialize", &gdn_materialize);
}
