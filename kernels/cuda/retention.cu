// One gated-retention decode step for a batch. One block per (sequence, head); a thread owns value
// column j of the hd×hd state, so each S row is read and written once, coalesced, and the
// per-column arithmetic is in the CPU's order (cpu::retention_recurrent: update S, then o_j = Σ_i
// q_i S_ij with i ascending). Later: several heads per block when hd is small, bf16 q/k/v inputs,
// and fusing the per-head RMSNorm and the silu(g) gate that follow.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 1024;  // bounded by the q/k staging in shared memory below

__global__ void __launch_bounds__(kThreads) retention_step_kernel(const RetentionStepArgs a) {
  const int b = blockIdx.x, h = blockIdx.y;
  const int hd = a.head_dim;
  __shared__ float q_s[kMaxHeadDim], k_s[kMaxHeadDim];
  const float* q = a.q + static_cast<int64_t>(b) * a.ldq + static_cast<int64_t>(h) * hd;
  const float* k = a.k + static_cast<int64_t>(b) * a.ldk + static_cast<int64_t>(h) * hd;
  const float* v = a.v + static_cast<int64_t>(b) * a.ldv + static_cast<int64_t>(h) * hd;
  // k' = k · k_scale rounded to fp32 first, as the CPU path scales k in place before the update.
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    q_s[i] = q[i];
    k_s[i] = k[i] * a.k_scale;
  }
  // docs/design.md §2.3: a = logsigmoid(gt) / τ, in the stable form cpu_backend.cc uses.
  const float x = a.gt[static_cast<int64_t>(b) * a.ldg + h];
  const float logsig = fminf(x, 0.0f) - log1pf(expf(-fabsf(x)));
  const float decay = expf(logsig * (1.0f / a.gate_logit_normalizer));
  __syncthreads();
  float* s = a.states[b] + static_cast<int64_t>(h) * hd * hd;
  float* o = a.out + static_cast<int64_t>(b) * a.ldo + static_cast<int64_t>(h) * hd;
  for (int j = threadIdx.x; j < hd; j += blockDim.x) {
    const float vj = v[j];
    float oj = 0.f;
    for (int i = 0; i < hd; ++i) {
      float* sij = s + static_cast<int64_t>(i) * hd + j;
      const float upd = decay * *sij + k_s[i] * vj;
      *sij = upd;
      oj += q_s[i] * upd;
    }
    o[j] = oj;
  }
}

}  // namespace

Status retention_decode_step(const RetentionStepArgs& a, void* stream) {
  const char* op = "retention_decode_step";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.batch < 0) return bad("batch must be >= 0");
  if (a.batch == 0) return Status::Ok();
  if (a.n_heads <= 0 || a.n_heads > 65535) return bad("n_heads must be in 1..65535");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..1024");
  const int width = a.n_heads * a.head_dim;
  if (a.ldq < width) return bad("ldq must be >= n_heads * head_dim");
  if (a.ldk < width) return bad("ldk must be >= n_heads * head_dim");
  if (a.ldv < width) return bad("ldv must be >= n_heads * head_dim");
  if (a.ldo < width) return bad("ldo must be >= n_heads * head_dim");
  if (a.ldg < a.n_heads) return bad("ldg must be >= n_heads");
  if (!(a.gate_logit_normalizer > 0)) return bad("gate_logit_normalizer must be > 0");
  if (!a.q) return bad("q is null");
  if (!a.k) return bad("k is null");
  if (!a.v) return bad("v is null");
  if (!a.gt) return bad("gt is null");
  if (!a.states) return bad("states is null");
  if (!a.out) return bad("out is null");
  retention_step_kernel<<<dim3(static_cast<unsigned>(a.batch), static_cast<unsigned>(a.n_heads)), kThreads, 0,
                          detail::as_stream(stream)>>>(a);
  return detail::launch_status(op);
}

}  // namespace yoco::cuda
