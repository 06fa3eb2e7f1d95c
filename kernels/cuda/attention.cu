// Paged cross-attention decode (flash-decoding): a partial kernel per (sequence, kv head, split of
// the keys) leaves an unnormalized (max, sum, acc) per query head, and a combine kernel merges the
// splits. Reference-quality first version; later: bf16 pool, K/V tiles staged through shared memory
// with cp.async/TMA, vectorized loads, tensor-core scores for large GQA groups, and a split count
// tuned to the SM count when lengths are short.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 128;     // keys scored per pass through shared memory
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;
constexpr int kMaxGroup = 16;
constexpr int kDefaultSplitKeys = 512;

// G bounds the GQA group (query heads per kv head) at compile time so the per-head scores and
// accumulators live in registers; `group` ≤ G is the actual size.
template <int G>
__global__ void __launch_bounds__(kThreads)
    paged_decode_partial_kernel(const PagedDecodeArgs a, int group, int split_keys, int n_splits,
                                float* __restrict__ part_acc, float* __restrict__ part_ml) {
  const int b = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int hd = a.head_dim;
  const int64_t pool_ld = a.pool_ld > 0 ? a.pool_ld : static_cast<int64_t>(a.n_kv_heads) * hd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* row_s = reinterpret_cast<int64_t*>(smem_raw);  // [kTile] element offsets of K/V rows
  float* q_s = reinterpret_cast<float*>(row_s + kTile);   // [group, hd]
  float* p_s = q_s + group * hd;                          // [group, kTile] scores, then weights
  __shared__ float m_s[G], l_s[G], corr_s[G];

  const int64_t len = a.lengths[b];
  const int64_t start = static_cast<int64_t>(split) * split_keys;
  const int64_t end = min(len, start + split_keys);
  const int h0 = kvh * group;  // the group's query heads are adjacent (docs/design.md §2.4: h / group)

  for (int i = tid; i < group * hd; i += kThreads) q_s[i] = a.q[static_cast<int64_t>(b) * a.ldq + h0 * hd + i];
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  float acc[G][kDimsPerThread];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) acc[g][i] = 0.f;
  __syncthreads();

  for (int64_t t0 = start; t0 < end; t0 += kTile) {
    const int nt = static_cast<int>(min(static_cast<int64_t>(kTile), end - t0));
    for (int tt = tid; tt < nt; tt += kThreads) {
      const int64_t t = t0 + tt;
      const int64_t blk = a.block_tables[static_cast<int64_t>(b) * a.max_blocks + t / a.block_size];
      row_s[tt] = (blk * a.block_size + t % a.block_size) * pool_ld + static_cast<int64_t>(kvh) * hd;
    }
    __syncthreads();
    // Scores: a warp per key, lanes over the head dims; each K row is read once for the group.
    for (int tt = warp; tt < nt; tt += kThreads / 32) {
      const float* kr = a.k_pool + row_s[tt];
      float s[G];
#pragma unroll
      for (int g = 0; g < G; ++g) s[g] = 0.f;
      for (int d = lane; d < hd; d += 32) {
        const float kd = kr[d];
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (g < group) s[g] += q_s[g * hd + d] * kd;
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        float v = s[g];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) p_s[g * kTile + tt] = v * a.scale;
      }
    }
    __syncthreads();
    // Online softmax: new running max per head and the factor that rescales what came before.
    if (tid < group) {
      float mt = -INFINITY;
      for (int tt = 0; tt < nt; ++tt) mt = fmaxf(mt, p_s[tid * kTile + tt]);
      const float m_new = fmaxf(m_s[tid], mt);
      corr_s[tid] = expf(m_s[tid] - m_new);  // exp(-inf) = 0 on the first tile
      m_s[tid] = m_new;
    }
    __syncthreads();
    for (int i = tid; i < group * nt; i += kThreads) {
      const int g = i / nt, tt = i % nt;
      p_s[g * kTile + tt] = expf(p_s[g * kTile + tt] - m_s[g]);
    }
    __syncthreads();
    if (tid < group) {
      float sum = 0.f;
      for (int tt = 0; tt < nt; ++tt) sum += p_s[tid * kTile + tt];
      l_s[tid] = l_s[tid] * corr_s[tid] + sum;
    }
    // acc += P·V: a thread per head dim, each V element read once for the whole group.
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = tid + i * kThreads;
      if (d >= hd) break;
#pragma unroll
      for (int g = 0; g < G; ++g)
        if (g < group) acc[g][i] *= corr_s[g];
      for (int tt = 0; tt < nt; ++tt) {
        const float vd = a.v_pool[row_s[tt] + d];
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (g < group) acc[g][i] += p_s[g * kTile + tt] * vd;
      }
    }
    __syncthreads();  // row_s, p_s and corr_s are rewritten by the next tile
  }

#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= group) break;
    const int64_t slot = (static_cast<int64_t>(b) * a.n_q_heads + h0 + g) * n_splits + split;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = tid + i * kThreads;
      if (d < hd) part_acc[slot * hd + d] = acc[g][i];
    }
    if (tid == 0) {
      part_ml[slot * 2] = m_s[g];
      part_ml[slot * 2 + 1] = l_s[g];
    }
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
  paged_decode_partial_kernel<G><<<grid, kThreads, smem, s>>>(a, group, split_keys, n_splits, part_acc, part_ml);
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

  const size_t smem = kTile * sizeof(int64_t) + static_cast<size_t>(group) * (a.head_dim + kTile) * sizeof(float);
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
