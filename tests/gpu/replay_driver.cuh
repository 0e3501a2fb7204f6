// The one long-run check both rules share: replay vs eager vs the float64 reference over many
// steps with in-launch commits, explicit commits, materialize, load, slot permutations in a pool
// larger than the batch, and null rows whose memory must stay bit-identical.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <future>
#include <numeric>

#include "harness.cuh"

namespace rtest {

struct slot_region {
  const void* ptr;
  size_t bytes_per_slot;
};

struct replay_run_config {
  int nseq = 2;       // active sequences
  int nnull = 1;      // null rows in every batch
  int num_slots = 7;  // pool size (larger than the batch)
  int steps = 2048;
  double tol = 2e-5;            // relative L2 error of each step's outputs
  double state_tol = 2e-5;      // relative L2 error of a materialized (fp32) state
  int flush_every = 257;        // explicit commit of a random subset this often
  int materialize_every = 509;  // compare the materialized state this often
};

struct replay_run_report {
  double max_replay_vs_ref = 0, max_eager_vs_ref = 0, max_replay_vs_eager = 0, max_state_err = 0;
  int commits_seen = 0;
};

/// The test configuration for outputs of type T: fp32 outputs must agree to fp32 rounding; bf16 or
/// fp16 outputs carry one rounding of their own (half an ulp, 2^-9 relative for bf16).
/// REPLAYSSM_TEST_STEPS overrides the number of steps (for compute-sanitizer runs).
template <class T>
replay_run_config default_run_config() {
  replay_run_config cfg;
  if (sizeof(T) < 4) cfg.tol = std::is_same<T, __half>::value ? 2e-3 : 8e-3;
  if (const char* s = std::getenv("REPLAYSSM_TEST_STEPS")) cfg.steps = std::atoi(s);
  if (cfg.steps < 2 * cfg.materialize_every) {  // short runs still flush and materialize
    cfg.flush_every = 7;
    cfg.materialize_every = 11;
  }
  return cfg;
}

/// The relative error of one stored element of S: round to nearest of the type (bf16 2^-8, fp16
/// 2^-11, fp8 e4m3 2^-4); int8 codes err by half a step of the row's scale, which relative to
/// the typical element (a few times smaller than the row's largest) is about 2^-5.
template <class S>
double unit_roundoff() {
  if (std::is_same<S, __half>::value) return std::ldexp(1.0, -11);
  if (std::is_same<S, __nv_fp8_e4m3>::value) return std::ldexp(1.0, -4);
  if (std::is_same<S, int8_t>::value) return std::ldexp(1.0, -5);
  return std::ldexp(1.0, -8);
}

/// The output tolerance of a case: its outputs' own rounding (default_run_config) and, for a
/// precision pair, the serving copy's: outputs read it, 4u (test_precision.cu says why).
template <class Case>
double output_tol() {
  using policy = typename Case::policy_t;
  double tol = default_run_config<typename Case::T>().tol;
  if constexpr (policy::has_serving_copy)
    tol = std::max(tol, 4 * unit_roundoff<typename policy::serving_type>());
  return tol;
}

/// The launches the driver makes, through the case's params (the pool they act on, the rows,
/// the output buffer) and its view of a caller's state buffer with `rows` rows.
template <class Case>
struct case_launches {
  Case& c;
  replayssm::result decode(const int32_t* idx, int rows, int32_t ns) {
    return replayssm::decode_step(c.params(c.pool_r.ptr, idx, rows, ns, c.out_r.ptr), 0);
  }
  replayssm::result eager(const int32_t* idx, int rows, int32_t ns) {
    return replayssm::eager_step(c.params(c.pool_e.ptr, idx, rows, ns, c.out_e.ptr), 0);
  }
  replayssm::result commit(const int32_t* idx, int rows, int32_t ns) {
    return replayssm::commit(c.params(c.pool_r.ptr, idx, rows, ns, c.out_r.ptr), 0);
  }
  replayssm::result materialize(const int32_t* idx, int rows, float* dest) {
    return replayssm::materialize(c.params(c.pool_r.ptr, idx, rows, -1, c.out_r.ptr),
                                  c.rows_pool(dest, rows), 0);
  }
  replayssm::result load(const int32_t* idx, int rows, const float* src) {
    return replayssm::load_state(c.params(c.pool_r.ptr, idx, rows, -1, c.out_r.ptr),
                                 c.rows_pool(const_cast<float*>(src), rows), 0);
  }
};

/// Row b of a downloaded output, as doubles.
template <class T>
std::vector<double> output_row(const std::vector<T>& h, int b, size_t n) {
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = host_to_float(h[b * n + i]);
  return r;
}
/// True when row b of a downloaded output still holds the 0xFF poison in every byte.
template <class T>
bool output_row_poisoned(const std::vector<T>& h, int b, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(h.data()) + b * n * sizeof(T);
  for (size_t i = 0; i < n * sizeof(T); ++i)
    if (p[i] != 0xFF) return false;
  return true;
}

/// Every slot's memory of a case (its slot_regions, in that order: checkpoints, buffers,
/// cursors, arrivals), downloaded whole.
template <class Case>
std::vector<std::vector<unsigned char>> download_slot_memory(const Case& c) {
  std::vector<std::vector<unsigned char>> h;
  for (const auto& r : c.slot_regions()) {
    std::vector<unsigned char> v(r.bytes_per_slot * size_t(c.num_slots));
    RTEST_CUDA(cudaMemcpy(v.data(), r.ptr, v.size(), cudaMemcpyDeviceToHost));
    h.push_back(std::move(v));
  }
  return h;
}

template <class Case>
replay_run_report run_replay_vs_eager(Case& c, const replay_run_config& cfg, std::mt19937_64& rng) {
  const int batch = cfg.nseq + cfg.nnull;
  const int32_t null_slot = -1;
  c.allocate(batch, cfg.num_slots, rng);
  case_launches<Case> launch{c};
  const size_t out_n = c.out_row_elems();

  std::vector<int> perm(cfg.num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<int> seq_slot(perm.begin(), perm.begin() + cfg.nseq);

  // Snapshot every slot's memory: slots no sequence owns must never change.
  const auto regions = c.slot_regions();
  const auto before = download_slot_memory(c);

  // Initial states (a prefill's result) loaded into both pools.
  std::vector<typename Case::ref_state> ref(cfg.nseq);
  {
    std::vector<float> src;
    for (int s = 0; s < cfg.nseq; ++s) {
      ref[s] = c.random_state(rng);
      const auto d = c.to_device_layout(ref[s]);
      src.insert(src.end(), d.begin(), d.end());
    }
    dev_array<float> src_dev(src.size());
    src_dev.upload(src);
    dev_array<int32_t> idx(cfg.nseq);
    idx.upload(std::vector<int32_t>(seq_slot.begin(), seq_slot.end()));
    RTEST_OK(launch.load(idx.ptr, cfg.nseq, src_dev.ptr));
    for (int s = 0; s < cfg.nseq; ++s)
      RTEST_CUDA(cudaMemcpy(c.eager_slot(seq_slot[s]), src_dev.ptr + s * c.state_elems(),
                            c.state_elems() * sizeof(float), cudaMemcpyDeviceToDevice));
  }

  replay_run_report rep;
  dev_array<int32_t> slot_idx(batch);
  std::vector<int> row_seq(batch);
  std::vector<typename Case::step_t> steps(cfg.nseq);
  std::vector<std::vector<double>> yref(cfg.nseq);
  for (int t = 0; t < cfg.steps; ++t) {
    for (int b = 0; b < batch; ++b) row_seq[b] = b < cfg.nseq ? b : -1;
    std::shuffle(row_seq.begin(), row_seq.end(), rng);
    std::vector<int32_t> idx(batch);
    for (int b = 0; b < batch; ++b) idx[b] = row_seq[b] >= 0 ? seq_slot[row_seq[b]] : null_slot;
    slot_idx.upload(idx);
    for (int s = 0; s < cfg.nseq; ++s) steps[s] = c.random_step(rng);
    for (int b = 0; b < batch; ++b)
      c.set_row(b, row_seq[b] >= 0 ? steps[row_seq[b]] : c.random_step(rng));
    c.upload_inputs();
    c.out_r.poison();
    c.out_e.poison();
    RTEST_OK(launch.decode(slot_idx.ptr, batch, null_slot));
    RTEST_OK(launch.eager(slot_idx.ptr, batch, null_slot));
    std::vector<std::future<void>> jobs;
    for (int s = 0; s < cfg.nseq; ++s)
      jobs.push_back(
          std::async(std::launch::async, [&, s] { c.ref_step(ref[s], steps[s], yref[s]); }));
    for (auto& j : jobs) j.get();
    RTEST_CUDA(cudaDeviceSynchronize());
    const auto hout_r = c.out_r.download(), hout_e = c.out_e.download();

    rel_err e_rr, e_er, e_re;
    for (int b = 0; b < batch; ++b) {
      if (row_seq[b] < 0) {
        INFO("step " << t << ": a null row's output was written");
        REQUIRE(output_row_poisoned(hout_r, b, out_n));
        REQUIRE(output_row_poisoned(hout_e, b, out_n));
        continue;
      }
      const auto yr = output_row(hout_r, b, out_n), ye = output_row(hout_e, b, out_n);
      const auto& y = yref[row_seq[b]];
      for (size_t i = 0; i < y.size(); ++i) {
        e_rr.add(yr[i], y[i]);
        e_er.add(ye[i], y[i]);
        e_re.add(yr[i], ye[i]);
      }
    }
    rep.max_replay_vs_ref = std::max(rep.max_replay_vs_ref, e_rr.value());
    rep.max_eager_vs_ref = std::max(rep.max_eager_vs_ref, e_er.value());
    rep.max_replay_vs_eager = std::max(rep.max_replay_vs_eager, e_re.value());
    INFO("step " << t << " replay-vs-ref " << e_rr.value() << " eager-vs-ref " << e_er.value()
                 << " replay-vs-eager " << e_re.value());
    REQUIRE(std::isfinite(e_rr.value()));
    REQUIRE(e_rr.value() < cfg.tol);
    REQUIRE(e_er.value() < cfg.tol);
    REQUIRE(e_re.value() < cfg.tol);

    if (cfg.flush_every > 0 && t % cfg.flush_every == cfg.flush_every - 1) {
      // Explicit commit of a random non-empty subset, in a shuffled order with a null row.
      std::vector<int32_t> sub;
      for (int s = 0; s < cfg.nseq; ++s)
        if (sub.empty() || (rng() & 1)) sub.push_back(seq_slot[s]);
      sub.push_back(null_slot);
      std::shuffle(sub.begin(), sub.end(), rng);
      dev_array<int32_t> sidx(sub.size());
      sidx.upload(sub);
      RTEST_OK(launch.commit(sidx.ptr, int(sub.size()), null_slot));
      RTEST_CUDA(cudaDeviceSynchronize());
      ++rep.commits_seen;
    }
    if (cfg.materialize_every > 0 && t % cfg.materialize_every == cfg.materialize_every - 1) {
      dev_array<float> dest(size_t(cfg.nseq) * c.state_elems());
      dest.poison();
      dev_array<int32_t> sidx(cfg.nseq);
      sidx.upload(std::vector<int32_t>(seq_slot.begin(), seq_slot.end()));
      RTEST_OK(launch.materialize(sidx.ptr, cfg.nseq, dest.ptr));
      const auto h = dest.download();
      for (int s = 0; s < cfg.nseq; ++s) {
        const auto st = c.from_device_layout(h.data() + s * c.state_elems());
        rel_err e;
        for (size_t i = 0; i < st.size(); ++i) e.add(st[i], ref[s][i]);
        rep.max_state_err = std::max(rep.max_state_err, e.value());
        INFO("materialized state of sequence " << s << " at step " << t << ": " << e.value());
        REQUIRE(e.value() < cfg.state_tol);
      }
    }
  }

  // Cursors of live slots stay inside the window; unused slots are bit-identical.
  const auto cur = c.cursor.download();
  for (int s = 0; s < cfg.nseq; ++s) {
    REQUIRE(cur[seq_slot[s]] >= 0);
    REQUIRE(cur[seq_slot[s]] < Case::commit_interval);
  }
  const auto after = download_slot_memory(c);
  for (size_t r = 0; r < regions.size(); ++r) {
    const auto& h = after[r];
    for (int slot = cfg.nseq; slot < cfg.num_slots; ++slot) {
      const size_t off = size_t(perm[slot]) * regions[r].bytes_per_slot;
      INFO("region " << r << " of unused slot " << perm[slot] << " changed");
      REQUIRE(std::memcmp(h.data() + off, before[r].data() + off, regions[r].bytes_per_slot) == 0);
    }
  }
  return rep;
}

/// The split decode step (a workspace: coefficient grid + stream kernel) against the fused one
/// (no workspace) on the same inputs, step by step: `fused` and `split` are two new cases of one
/// policy and shape; the driver gives `split` the workspace and allocates both from generators
/// of `seed` (the same weights and the same junk in every slot). Rows join at staggered steps
/// (row r at step r % K: every launch mixes committing and replay rows), plus null rows. After
/// every launch the memory of every slot (checkpoints, buffers, cursors, arrivals) must be
/// identical byte for byte: a commit folds the same buffered values with the same code whichever
/// grid runs it, and the split step appends the same bits as the fused one. The outputs of
/// committing rows must be bit-identical too; replay rows' outputs agree within `output_tol`
/// (the stream kernel sums in another order). Returns the largest relative difference of replay
/// rows' outputs.
template <class Case>
double run_split_vs_fused(Case& fused, Case& split, int nseq, int steps, uint64_t seed) {
  constexpr int K = Case::commit_interval;
  const int batch = nseq + 2, num_slots = nseq + 8;
  const int32_t null_slot = -1;
  fused.use_workspace = false;
  split.use_workspace = true;
  {
    std::mt19937_64 gf(seed), gs(seed);  // the same weights and junk in both
    fused.allocate(batch, num_slots, gf);
    split.allocate(batch, num_slots, gs);
  }
  std::mt19937_64 rng(seed + 1);
  const size_t out_n = fused.out_row_elems();
  std::vector<int> perm(num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  {  // the same initial states in both (cursor 0)
    std::vector<float> src;
    for (int s = 0; s < nseq; ++s) {
      const auto d = fused.to_device_layout(fused.random_state(rng));
      src.insert(src.end(), d.begin(), d.end());
    }
    dev_array<float> src_dev(src.size());
    src_dev.upload(src);
    dev_array<int32_t> idx(nseq);
    idx.upload(std::vector<int32_t>(perm.begin(), perm.begin() + nseq));
    RTEST_OK(case_launches<Case>{fused}.load(idx.ptr, nseq, src_dev.ptr));
    RTEST_OK(case_launches<Case>{split}.load(idx.ptr, nseq, src_dev.ptr));
  }
  dev_array<int32_t> slot_idx(batch);
  std::vector<int> taken(nseq, 0);  // steps each sequence has taken
  double max_replay_diff = 0;
  int commit_rows = 0;
  for (int t = 0; t < steps; ++t) {
    std::vector<int> row_seq(batch);
    for (int b = 0; b < batch; ++b) row_seq[b] = b < nseq && t >= b % K ? b : -1;
    std::shuffle(row_seq.begin(), row_seq.end(), rng);
    std::vector<int32_t> idx(batch);
    for (int b = 0; b < batch; ++b) idx[b] = row_seq[b] >= 0 ? perm[row_seq[b]] : null_slot;
    slot_idx.upload(idx);
    for (int b = 0; b < batch; ++b) {
      const auto st = fused.random_step(rng);
      fused.set_row(b, st);
      split.set_row(b, st);
    }
    for (Case* c : {&fused, &split}) {
      c->upload_inputs();
      c->out_r.poison();
      RTEST_OK(case_launches<Case>{*c}.decode(slot_idx.ptr, batch, null_slot));
    }
    RTEST_CUDA(cudaDeviceSynchronize());
    const auto hf = download_slot_memory(fused), hs = download_slot_memory(split);
    REQUIRE(hf.size() == hs.size());
    for (size_t r = 0; r < hf.size(); ++r) {
      INFO("step " << t << ": slot memory region " << r << " differs (split vs fused)");
      REQUIRE(hf[r] == hs[r]);
    }
    const auto of = fused.out_r.download(), os = split.out_r.download();
    rel_err e;
    for (int b = 0; b < batch; ++b) {
      if (row_seq[b] < 0) continue;
      const bool commits = taken[row_seq[b]] % K == K - 1;  // n + 1 == K buffered before it
      ++taken[row_seq[b]];
      if (commits) {
        ++commit_rows;
        INFO("step " << t << ", row " << b << ": a committing row's output differs");
        const size_t bytes = out_n * sizeof(of[0]);
        REQUIRE(std::memcmp(of.data() + b * out_n, os.data() + b * out_n, bytes) == 0);
      } else {
        const auto yf = output_row(of, b, out_n), ys = output_row(os, b, out_n);
        for (size_t i = 0; i < out_n; ++i) e.add(ys[i], yf[i]);
      }
    }
    INFO("step " << t << ": replay rows' outputs, split vs fused " << e.value());
    REQUIRE(std::isfinite(e.value()));
    REQUIRE(e.value() < output_tol<Case>());
    max_replay_diff = std::max(max_replay_diff, e.value());
  }
  REQUIRE(commit_rows >= nseq);  // every sequence committed at least once
  return max_replay_diff;
}

/// One section of the "split decode step commits exactly as the fused step" test cases: two
/// cases of one policy and shape (`args`: the case's constructor arguments), run_split_vs_fused
/// over 24 sequences and max(4 K, 24) steps, then the replay rows' largest difference printed.
template <class Case, class... Args>
void check_split_vs_fused(const char* rule, const char* shape, uint64_t seed, Args... args) {
  constexpr int K = Case::commit_interval;
  Case fused(args...), split(args...);
  const double d = run_split_vs_fused(fused, split, 24, std::max(4 * K, 24), seed);
  std::printf("[%s split vs fused K=%d L=%d %s] replay rows max rel diff %.2e\n", rule, K, Case::L,
              shape, d);
}

}  // namespace rtest
