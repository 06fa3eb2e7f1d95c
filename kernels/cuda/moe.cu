// A mixture of experts on the device (docs/design.md §2.2), the GPU twin of kernels/cpu/moe.cc
// (routing) and of model/moe_cpu.cc (the grouped experts). How many rows each expert gets stays on
// the device, so nothing is read back and a decode step's FFN is captured in its CUDA graph.
#include <algorithm>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace yoco::cuda {
namespace {

using detail::bf16;

constexpr int kLogitThreads = 128;  // 4 warps: each takes every 4th expert

// logits[r, e] = x[r] · router[e] (fp32 sums over bf16 x and fp32 router), one block per row.
__global__ void router_logits_kernel(const bf16* __restrict__ x, const float* __restrict__ router, int dim, int E,
                                     float* __restrict__ logits) {
  extern __shared__ float xs[];
  const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) xs[i] = __bfloat162float(x[static_cast<int64_t>(r) * dim + i]);
  __syncthreads();
  for (int e = warp; e < E; e += kLogitThreads / 32) {
    const float* w = router + static_cast<int64_t>(e) * dim;
    float s = 0.f;
    for (int i = lane; i < dim; i += 32) s = fmaf(xs[i], w[i], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) logits[static_cast<int64_t>(r) * E + e] = s;
  }
}

// As cpu::moe_route, one thread per row (E · k steps: tiny next to the experts' products).
__global__ void route_kernel(const float* __restrict__ logits, int rows, int E, int k, bool norm_topk,
                             float* __restrict__ probs, int32_t* __restrict__ experts, float* __restrict__ experts_f,
                             float* __restrict__ weights) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + static_cast<int64_t>(r) * E;
  float* p = probs + static_cast<int64_t>(r) * E;
  float mx = l[0];
  for (int e = 1; e < E; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0.f;
  for (int e = 0; e < E; ++e) {
    p[e] = expf(l[e] - mx);  // expf, as the CPU's std::exp
    sum += p[e];
  }
  const float inv = 1.0f / sum;
  for (int e = 0; e < E; ++e) p[e] *= inv;
  uint32_t taken[kMoeMaxExperts / 32];
  for (int i = 0; i < (E + 31) / 32; ++i) taken[i] = 0;
  float chosen = 0.f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!((taken[e >> 5] >> (e & 31)) & 1u) && (best < 0 || p[e] > p[best])) best = e;  // ties: lower index
    taken[best >> 5] |= 1u << (best & 31);
    experts[static_cast<int64_t>(r) * k + j] = best;
    if (experts_f) experts_f[static_cast<int64_t>(r) * k + j] = static_cast<float>(best);
    weights[static_cast<int64_t>(r) * k + j] = p[best];
    chosen += p[best];
  }
  if (norm_topk)
    for (int j = 0; j < k; ++j) weights[static_cast<int64_t>(r) * k + j] /= chosen;
}

// One block: a histogram of the experts (shared atomics: counts do not depend on the order), the
// offsets, then warp 0 ranks the assignments in order, 32 at a time, so that rows stay ascending
// within an expert whatever the scheduling.
constexpr int kPermuteThreads = 256;
__global__ void permute_kernel(const int32_t* __restrict__ experts, int A, int k, int E, int32_t* __restrict__ offsets,
                               int32_t* __restrict__ tile_offsets, int32_t* __restrict__ src_rows,
                               int32_t* __restrict__ slot_rows) {
  __shared__ int32_t count[kMoeMaxExperts], next[kMoeMaxExperts];
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int a = threadIdx.x; a < A; a += blockDim.x) atomicAdd(&count[experts[a]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0, tiles = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = off;
      tile_offsets[e] = tiles;
      next[e] = off;
      off += count[e];
      tiles += (count[e] + kMoeTileRows - 1) / kMoeTileRows;
    }
    offsets[E] = off;
    tile_offsets[E] = tiles;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  for (int base = 0; base < A; base += 32) {
    const int a = base + lane;
    const bool live = a < A;
    const int e = live ? experts[a] : -1 - lane;  // a distinct dummy for the tail lanes
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const int32_t start = live ? next[e] : 0;
    __syncwarp();
    if (live) {
      const int32_t pos = start + rank;
      src_rows[pos] = a / k;
      slot_rows[a] = pos;
      if (rank == 0) next[e] = start + __popc(peers);  // the group's leader moves the cursor
    }
    __syncwarp();
  }
}

// The grouped GEMM: a block computes one kMoeTileRows × kBn tile of one expert's rows. blockIdx.y
// walks the experts' tiles (tile_offsets), blockIdx.x the output columns. 4 warps of 32 × 32.
constexpr int kBm = kMoeTileRows, kBn = 64, kBk = 32, kLd = kBk + 8;
__global__ void __launch_bounds__(128)
    grouped_gemm_kernel(const bf16* __restrict__ a, const int32_t* __restrict__ a_rows, const bf16* __restrict__ w,
                        int64_t w_stride, float* __restrict__ c, const int32_t* __restrict__ offsets,
                        const int32_t* __restrict__ tile_offsets, int E, int n, int k) {
  __shared__ __align__(16) bf16 as[kBm * kLd];
  __shared__ __align__(16) bf16 bs[kBn * kLd];
  const int t = blockIdx.y;
  if (t >= tile_offsets[E]) return;
  int lo = 0, hi = E;  // the expert whose tiles hold t: tile_offsets[e] <= t < tile_offsets[e + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tile_offsets[mid] <= t) lo = mid;
    else hi = mid;
  }
  const int e = lo;
  const int row0 = offsets[e] + (t - tile_offsets[e]) * kBm, row_end = offsets[e + 1];
  const int col0 = blockIdx.x * kBn;
  const bf16* we = w + static_cast<int64_t>(e) * w_stride;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kBk) {
    // 64 rows × 32 columns of each operand: 256 vectors of 8 bf16, 2 per thread.
    for (int v = tid; v < kBm * kBk / 8; v += blockDim.x) {
      const int r = v / (kBk / 8), cc = (v % (kBk / 8)) * 8;
      uint4 av = make_uint4(0, 0, 0, 0), bv = make_uint4(0, 0, 0, 0);
      if (row0 + r < row_end && k0 + cc < k) {
        const int src = a_rows ? a_rows[row0 + r] : row0 + r;
        av = *reinterpret_cast<const uint4*>(a + static_cast<int64_t>(src) * k + k0 + cc);
      }
      if (col0 + r < n && k0 + cc < k)
        bv = *reinterpret_cast<const uint4*>(we + static_cast<int64_t>(col0 + r) * k + k0 + cc);
      *reinterpret_cast<uint4*>(as + r * kLd + cc) = av;
      *reinterpret_cast<uint4*>(bs + r * kLd + cc) = bv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t af[2][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) detail::load_a(af[mi], as, kLd, wm * 32 + mi * 16, kk, lane);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) detail::load_b(bfr[ni], bs, kLd, wn * 32 + ni * 8, kk, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) detail::mma_16816(acc[mi][ni], af[mi], bfr[ni]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = row0 + wm * 32 + mi * 16 + detail::c_row(lane, q);
        const int col = col0 + wn * 32 + ni * 8 + detail::c_col(lane, q);
        if (r < row_end && col < n) c[static_cast<int64_t>(r) * n + col] = acc[mi][ni][q];
      }
}

__global__ void combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ slot_rows,
                               const float* __restrict__ weights, int rows, int k, int dim, float* __restrict__ h) {
  const int64_t total = static_cast<int64_t>(rows) * dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, d = i % dim;
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += weights[r * k + j] * y[static_cast<int64_t>(slot_rows[r * k + j]) * dim + d];
    h[i] += s;
  }
}

unsigned grid_for(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65536));
}

Status check_experts(const char* op, int E, int k) {
  const std::string o(op);
  if (E < 1 || E > kMoeMaxExperts)
    return invalid_argument(o + ": n_experts must be in [1, " + std::to_string(kMoeMaxExperts) + "], got " +
                            std::to_string(E));
  if (k < 1 || k > E) return invalid_argument(o + ": k must be in [1, n_experts], got " + std::to_string(k));
  return Status::Ok();
}

}  // namespace

Status moe_router_logits(const uint16_t* x, const float* router, int rows, int dim, int n_experts, float* logits,
                         void* stream) {
  if (rows < 0 || dim <= 0) return invalid_argument("moe_router_logits: rows must be >= 0 and dim > 0");
  if (n_experts < 1) return invalid_argument("moe_router_logits: n_experts must be >= 1");
  if (rows == 0) return Status::Ok();
  if (!x || !router || !logits) return invalid_argument("moe_router_logits: x, router and logits must be set");
  const size_t shared = static_cast<size_t>(dim) * 4;
  if (shared > 48 * 1024) return invalid_argument("moe_router_logits: dim " + std::to_string(dim) + " over 12288");
  router_logits_kernel<<<rows, kLogitThreads, shared, detail::as_stream(stream)>>>(detail::as_bf16(x), router, dim,
                                                                                   n_experts, logits);
  return detail::launch_status("moe_router_logits");
}

Status moe_route(const MoeRouteArgs& a, void* stream) {
  YOCO_CUDA_RETURN_IF_ERROR(check_experts("moe_route", a.n_experts, a.k));
  if (a.rows < 0) return invalid_argument("moe_route: rows must be >= 0");
  if (a.rows == 0) return Status::Ok();
  if (!a.logits || !a.probs || !a.experts || !a.weights)
    return invalid_argument("moe_route: logits, probs, experts and weights must be set");
  route_kernel<<<grid_for(a.rows, 128), 128, 0, detail::as_stream(stream)>>>(
      a.logits, a.rows, a.n_experts, a.k, a.norm_topk, a.probs, a.experts, a.experts_f, a.weights);
  return detail::launch_status("moe_route");
}

Status moe_permute(const MoePermuteArgs& a, void* stream) {
  YOCO_CUDA_RETURN_IF_ERROR(check_experts("moe_permute", a.n_experts, a.k));
  if (a.rows < 0) return invalid_argument("moe_permute: rows must be >= 0");
  if (!a.experts || !a.offsets || !a.tile_offsets || !a.src_rows || !a.slot_rows)
    return invalid_argument("moe_permute: experts, offsets, tile_offsets, src_rows and slot_rows must be set");
  permute_kernel<<<1, kPermuteThreads, 0, detail::as_stream(stream)>>>(
      a.experts, a.rows * a.k, a.k, a.n_experts, a.offsets, a.tile_offsets, a.src_rows, a.slot_rows);
  return detail::launch_status("moe_permute");
}

Status moe_grouped_gemm(const MoeGemmArgs& a, void* stream) {
  const std::string o = "moe_grouped_gemm";
  if (a.n_experts < 1 || a.n_experts > kMoeMaxExperts) return invalid_argument(o + ": n_experts out of range");
  if (a.total_rows < 0 || a.n <= 0 || a.k <= 0) return invalid_argument(o + ": total_rows >= 0, n > 0, k > 0");
  if (a.k % 8 != 0)
    return invalid_argument(o + ": k must be a multiple of 8 (16-byte rows), got " + std::to_string(a.k));
  if (a.total_rows == 0) return Status::Ok();
  if (!a.a || !a.w || !a.c || !a.offsets || !a.tile_offsets)
    return invalid_argument(o + ": a, w, c, offsets and tile_offsets must be set");
  if (reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || a.w_stride % 8 != 0)
    return invalid_argument(o + ": a, w (and each expert's w) must be 16-byte aligned");
  // At most ceil(rows / tile) tiles plus one partial tile per expert that has rows.
  const int64_t tiles = (a.total_rows + kMoeTileRows - 1) / kMoeTileRows + std::min(a.n_experts, a.total_rows);
  if (tiles > 65535)
    return invalid_argument(o + ": " + std::to_string(a.total_rows) + " rows is too many for one launch");
  const dim3 grid((a.n + kBn - 1) / kBn, static_cast<unsigned>(tiles));
  grouped_gemm_kernel<<<grid, 128, 0, detail::as_stream(stream)>>>(detail::as_bf16(a.a), a.a_rows, detail::as_bf16(a.w),
                                                                   a.w_stride, a.c, a.offsets, a.tile_offsets,
                                                                   a.n_experts, a.n, a.k);
  return detail::launch_status("moe_grouped_gemm");
}

Status moe_combine(const float* y, const int32_t* slot_rows, const float* weights, int rows, int k, int dim, float* h,
                   void* stream) {
  if (rows < 0 || k < 1 || dim <= 0) return invalid_argument("moe_combine: rows >= 0, k >= 1, dim > 0");
  if (rows == 0) return Status::Ok();
  if (!y || !slot_rows || !weights || !h)
    return invalid_argument("moe_combine: y, slot_rows, weights and h must be set");
  combine_kernel<<<grid_for(static_cast<int64_t>(rows) * dim, 256), 256, 0, detail::as_stream(stream)>>>(
      y, slot_rows, weights, rows, k, dim, h);
  return detail::launch_status("moe_combine");
}

}  // namespace yoco::cuda
