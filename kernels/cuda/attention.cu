// Paged cross-attention decode (flash-decoding): a partial kernel per (sequence, kv head, split of
// the keys) leaves an unnormalized (max, sum, acc) per query head, and a combine kernel merges the
// splits. The partial kernel walks its keys in tiles of kTileKeys: (1) a warp per key scores it
// against the group's query heads, lane l holding dims l, l + 32, … of q (pre-scaled) in registers,
// two keys in flight per warp, a butterfly sum per head; (2) a warp per head takes the tile's max,
// the exponentials and their sum, and the factor that rescales what came before (online softmax);
// (3) a warp per key adds p·v into its lanes' accumulators for every head of the group. Each K and
// V element is read from the pool once per block, coalesced (a row is 32 lanes × 4 bytes per load),
// and no step is serial over the keys. At the end the warps' accumulators are summed through shared
// memory. Later: bf16 pool, cp.async/TMA staging, tensor-core scores for large GQA groups.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 64;  // keys scored per pass through shared memory
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kDefaultSplitKeys = 512;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// One K (or V) row's dims for this lane: d = lane + 32·i.
template <int DPL>
__device__ __forceinline__ void load_row(const float* __restrict__ r, int hd, int lane, float (&x)[DPL]) {
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < hd ? r[d] : 0.f;
  }
}

// G bounds the GQA group (query heads per kv head) and DPL the dims per lane (head_dim / 32,
// rounded up to 1, 2, 4 or 8) at compile time, so q and the accumulators live in registers;
// `group` ≤ G is the actual size.
template <int G, int DPL>
__global__ void __launch_bounds__(kThreads)
    paged_decode_partial_kernel(const PagedDecodeArgs a, int group, int split_keys, int n_splits,
                                float* __restrict__ part_acc, float* __restrict__ part_ml) {
  const int b = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int hd = a.head_dim;
  const int64_t pool_ld = a.pool_ld > 0 ? a.pool_ld : static_cast<int64_t>(a.n_kv_heads) * hd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sum_s = reinterpret_cast<float*>(smem_raw);  // [group, hd]: the warps' accumulators, summed
  __shared__ int64_t row_s[kTileKeys];                // element offsets of the tile's K/V rows
  __shared__ float p_s[G][kTileKeys];                 // scores, then weights
  __shared__ float m_s[G], l_s[G], corr_s[G];

  const int64_t len = a.lengths[b];
  const int64_t start = static_cast<int64_t>(split) * split_keys;
  const int64_t end = min(len, start + split_keys);
  const int h0 = kvh * group;  // the group's query heads are adjacent (docs/design.md §2.4: h / group)

  float q[G][DPL], acc[G][DPL];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = lane + 32 * i;
      q[g][i] = g < group && d < hd
                    ? a.q[static_cast<int64_t>(b) * a.ldq + static_cast<int64_t>(h0 + g) * hd + d] * a.scale
                    : 0.f;
      acc[g][i] = 0.f;
    }
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }

  for (int64_t t0 = start; t0 < end; t0 += kTileKeys) {
    const int nt = static_cast<int>(min(static_cast<int64_t>(kTileKeys), end - t0));
    for (int tt = tid; tt < nt; tt += kThreads) {
      const int64_t t = t0 + tt;
      const int64_t blk = a.block_tables[static_cast<int64_t>(b) * a.max_blocks + t / a.block_size];
      row_s[tt] = (blk * a.block_size + t % a.block_size) * pool_ld + static_cast<int64_t>(kvh) * hd;
    }
    __syncthreads();
    // (1) Scores, two keys per warp in flight.
    for (int tt = warp; tt < nt; tt += 2 * kWarps) {
      const int tt2 = tt + kWarps;
      float k1[DPL], k2[DPL];
      load_row<DPL>(a.k_pool + row_s[tt], hd, lane, k1);
      if (tt2 < nt) load_row<DPL>(a.k_pool + row_s[tt2], hd, lane, k2);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        float s1 = 0.f, s2 = 0.f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
          s1 += q[g][i] * k1[i];
          s2 += q[g][i] * k2[i];
        }
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        if (lane == 0) {
          p_s[g][tt] = s1;
          if (tt2 < nt) p_s[g][tt2] = s2;
        }
      }
    }
    __syncthreads();
    // (2) Online softmax, a warp per head.
    for (int g = warp; g < group; g += kWarps) {
      const float m_old = m_s[g];
      float mx = -INFINITY;
      for (int tt = lane; tt < nt; tt += 32) mx = fmaxf(mx, p_s[g][tt]);
      const float m_new = fmaxf(m_old, warp_max(mx));
      float sum = 0.f;
      for (int tt = lane; tt < nt; tt += 32) {
        const float e = expf(p_s[g][tt] - m_new);
        p_s[g][tt] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // exp(-inf) = 0 on the first tile
        corr_s[g] = corr;
        l_s[g] = l_s[g] * corr + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    // (3) acc = acc·corr + Σ p·v, a warp per key.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= group) break;
      const float c = corr_s[g];
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= c;
    }
    for (int tt = warp; tt < nt; tt += 2 * kWarps) {
      const int tt2 = tt + kWarps;
      float v1[DPL], v2[DPL];
      load_row<DPL>(a.v_pool + row_s[tt], hd, lane, v1);
      const bool two = tt2 < nt;
      if (two) load_row<DPL>(a.v_pool + row_s[tt2], hd, lane, v2);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        const float p1 = p_s[g][tt], p2 = two ? p_s[g][tt2] : 0.f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] += p1 * v1[i] + (two ? p2 * v2[i] : 0.f);
      }
    }
    __syncthreads();  // row_s, p_s and corr_s are rewritten by the next tile
  }

  // The warps' accumulators, summed in warp order.
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) sum_s[g * hd + d] = w == 0 ? acc[g][i] : sum_s[g * hd + d] + acc[g][i];
        }
      }
    }
    __syncthreads();
  }
  for (int i = tid; i < group * hd; i += kThreads) {
    const int g = i / hd, d = i % hd;
    const int64_t slot = (static_cast<int64_t>(b) * a.n_q_heads + h0 + g) * n_splits + split;
    part_acc[slot * hd + d] = sum_s[i];
  }
  if (tid < group) {
    const int64_t slot = (static_cast<int64_t>(b) * a.n_q_heads + h0 + tid) * n_splits + split;
    part_ml[slot * 2] = m_s[tid];
    part_ml[slot * 2 + 1] = l_s[tid];
  }
}

// One block per (sequence, query head). Empty splits (m = -inf) are skipped, so the result does not
// depend on how many splits the batch's longest sequence needed.
__global__ void __launch_bounds__(kThreads)
    paged_decode_combine_kernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml, int n_splits,
                                int hd, int n_q_heads, float* __restrict__ out, int ldo) {
  const int b = blockIdx.x, h = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(b) * n_q_heads + h) * n_splits;
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, part_ml[(base + s) * 2]);
  float l = 0.f;
  for (int s = 0; s < n_splits; ++s) {
    const float m = part_ml[(base + s) * 2];
    if (m != -INFINITY) l += part_ml[(base + s) * 2 + 1] * expf(m - mx);
  }
  float* o = out + static_cast<int64_t>(b) * ldo + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    if (l == 0.f) {  // no keys: zeros rather than 0/0
      o[d] = 0.f;
      continue;
    }
    float acc = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float m = part_ml[(base + s) * 2];
      if (m != -INFINITY) acc += part_acc[(base + s) * hd + d] * expf(m - mx);
    }
    o[d] = acc / l;
  }
}

template <int G>
void launch_partial(dim3 grid, size_t smem, cudaStream_t s, const PagedDecodeArgs& a, int group, int split_keys,
                    int n_splits, float* part_acc, float* part_ml) {
  // The one place the runtime head dim becomes DPL.
  if (a.head_dim <= 32)
    paged_decode_partial_kernel<G, 1><<<grid, kThreads, smem, s>>>(a, group, split_keys, n_splits, part_acc, part_ml);
  else if (a.head_dim <= 64)
    paged_decode_partial_kernel<G, 2><<<grid, kThreads, smem, s>>>(a, group, split_keys, n_splits, part_acc, part_ml);
  else if (a.head_dim <= 128)
    paged_decode_partial_kernel<G, 4><<<grid, kThreads, smem, s>>>(a, group, split_keys, n_splits, part_acc, part_ml);
  else
    paged_decode_partial_kernel<G, 8><<<grid, kThreads, smem, s>>>(a, group, split_keys, n_splits, part_acc, part_ml);
}

}  // namespace

Status decode_attention_paged(const PagedDecodeArgs& a, void* stream) {
  const char* op = "decode_attention_paged";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.batch < 0) return bad("batch must be >= 0");
  if (a.batch == 0) return Status::Ok();
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0) return bad("n_q_heads and n_kv_heads must be > 0");
  if (a.n_q_heads % a.n_kv_heads != 0) return bad("n_q_heads must be a multiple of n_kv_heads");
  const int group = a.n_q_heads / a.n_kv_heads;
  if (group > kMaxGroup) return bad("n_q_heads / n_kv_heads must be <= 16");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..256");
  if (a.block_size <= 0) return bad("block_size must be > 0");
  if (a.max_blocks <= 0) return bad("max_blocks must be > 0");
  if (a.max_length < 0) return bad("max_length must be >= 0");
  if (a.max_length > static_cast<int64_t>(a.max_blocks) * a.block_size)
    return bad("max_length must be <= max_blocks * block_size");
  if (a.ldq < a.n_q_heads * a.head_dim) return bad("ldq must be >= n_q_heads * head_dim");
  if (a.ldo < a.n_q_heads * a.head_dim) return bad("ldo must be >= n_q_heads * head_dim");
  if (a.split_keys < 0) return bad("split_keys must be >= 0");
  if (a.pool_ld != 0 && a.pool_ld < static_cast<int64_t>(a.n_kv_heads) * a.head_dim)
    return bad("pool_ld must be 0 or >= n_kv_heads * head_dim");
  if (!a.q) return bad("q is null");
  if (!a.out) return bad("out is null");
  if (!a.k_pool) return bad("k_pool is null");
  if (!a.v_pool) return bad("v_pool is null");
  if (!a.block_tables) return bad("block_tables is null");
  if (!a.lengths) return bad("lengths is null");
  if (a.n_kv_heads > 65535) return bad("n_kv_heads must be <= 65535");
  if (a.n_q_heads > 65535) return bad("n_q_heads must be <= 65535");

  const int split_keys = a.split_keys > 0 ? a.split_keys : kDefaultSplitKeys;
  const int64_t n_splits64 = std::max<int64_t>(1, (a.max_length + split_keys - 1) / split_keys);
  if (n_splits64 > 65535) return bad("max_length / split_keys must be <= 65535 (raise split_keys)");
  const int n_splits = static_cast<int>(n_splits64);

  const int64_t slots = static_cast<int64_t>(a.batch) * a.n_q_heads * n_splits;
  const size_t acc_bytes = static_cast<size_t>(slots) * a.head_dim * sizeof(float);
  const size_t ml_bytes = static_cast<size_t>(slots) * 2 * sizeof(float);
  auto buf = detail::scratch(stream, detail::ScratchSlot::kAttentionPartials, acc_bytes + ml_bytes);
  if (!buf.ok()) return buf.status();
  float* part_acc = static_cast<float*>(*buf);
  float* part_ml = part_acc + slots * a.head_dim;

  const size_t smem = static_cast<size_t>(group) * a.head_dim * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.batch), static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(n_splits));
  cudaStream_t s = detail::as_stream(stream);
  // The one place the runtime group size becomes a template parameter.
  if (group <= 1) launch_partial<1>(grid, smem, s, a, group, split_keys, n_splits, part_acc, part_ml);
  else if (group <= 2) launch_partial<2>(grid, smem, s, a, group, split_keys, n_splits, part_acc, part_ml);
  else if (group <= 4) launch_partial<4>(grid, smem, s, a, group, split_keys, n_splits, part_acc, part_ml);
  else if (group <= 8) launch_partial<8>(grid, smem, s, a, group, split_keys, n_splits, part_acc, part_ml);
  else launch_partial<16>(grid, smem, s, a, group, split_keys, n_splits, part_acc, part_ml);
  YOCO_CUDA_RETURN_IF_ERROR(detail::launch_status("decode_attention_paged (partial)"));
  paged_decode_combine_kernel<<<dim3(static_cast<unsigned>(a.batch), static_cast<unsigned>(a.n_q_heads)), kThreads, 0,
                                s>>>(part_acc, part_ml, n_splits, a.head_dim, a.n_q_heads, a.out, a.ldo);
  return detail::launch_status("decode_attention_paged (combine)");
}

Status decode_attention_paged_reserve(const PagedDecodeArgs& a, void* stream) {
  auto bad = [](const char* what) { return invalid_argument(std::string("decode_attention_paged_reserve: ") + what); };
  if (a.batch < 0 || a.n_q_heads <= 0 || a.head_dim <= 0 || a.max_length < 0 || a.split_keys < 0)
    return bad("batch, max_length, split_keys >= 0 and n_q_heads, head_dim > 0 required");
  if (a.batch == 0) return Status::Ok();
  // The same sizes as decode_attention_paged above.
  const int split_keys = a.split_keys > 0 ? a.split_keys : kDefaultSplitKeys;
  const int64_t n_splits = std::max<int64_t>(1, (a.max_length + split_keys - 1) / split_keys);
  const int64_t slots = static_cast<int64_t>(a.batch) * a.n_q_heads * n_splits;
  const size_t bytes =
      static_cast<size_t>(slots) * a.head_dim * sizeof(float) + static_cast<size_t>(slots) * 2 * sizeof(float);
  return detail::scratch(stream, detail::ScratchSlot::kAttentionPartials, bytes).status();
}

}  // namespace yoco::cuda
