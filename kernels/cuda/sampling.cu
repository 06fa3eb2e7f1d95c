// Device sampling (ops.h), model/sampler.cc's algorithm step for step. Every row's candidates are
// sorted once by a device-wide radix sort of 64-bit keys (row, descending logit, index): the
// order the CPU's std::sort by (logit desc, index asc) gives, with the logit bits kept exact in
// the key. Then a block per row walks its sorted keys: the normalizer over the top-k, the top-p
// and min-p cuts, and the draw, in double as on the CPU, prefix sums by block scans.
// Later: radix-select of the top few thousand candidates instead of the full sort (the walk
// rarely leaves them), skipping greedy rows in the sort, and fusing the penalties.
#include <climits>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kRowWarps = kRowThreads / 32;

// --- model/sampler.cc's generator: splitmix64 seeding, xoshiro256** ------------------------------
__device__ __forceinline__ uint64_t rotl64(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }

__device__ __forceinline__ uint64_t xoshiro_next(uint64_t s[4]) {
  const uint64_t result = rotl64(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

__global__ void rng_init_kernel(const uint64_t* seeds, const int64_t* draws, uint64_t* states, int batch) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  uint64_t x = seeds[b], s[4];
  for (auto& w : s) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    w = z ^ (z >> 31);
  }
  for (int64_t n = draws ? draws[b] : 0; n > 0; --n) xoshiro_next(s);
  for (int i = 0; i < 4; ++i) states[static_cast<int64_t>(b) * 4 + i] = s[i];
}

// --- keys ----------------------------------------------------------------------------------------
// 32 bits that sort ascending as the logit descends. −0 is keyed as +0: the CPU compares them
// equal, so the index decides between them.
__device__ __forceinline__ uint32_t descending_bits(float x) {
  const uint32_t u = x == 0.f ? 0u : __float_as_uint(x);
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with x
  return ~ord;
}
__device__ __forceinline__ float logit_of(uint32_t desc) {
  const uint32_t ord = ~desc;
  return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}

// key = row << (32 + ib) | descending_bits(logit) << ib | index, ib = bits of vocab − 1.
__global__ void make_keys_kernel(const float* logits, int64_t ld, int vocab, int ib, int64_t total, uint64_t* keys) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / vocab;
    const int col = static_cast<int>(i % vocab);
    const uint64_t bits = descending_bits(logits[row * ld + col]);
    keys[i] = (static_cast<uint64_t>(row) << (32 + ib)) | (bits << ib) | static_cast<uint64_t>(col);
  }
}

// --- block-wide helpers (every thread gets the result; fixed order, so deterministic) ------------
template <class T, class Op>
__device__ T block_reduce(T v, T* red, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) red[warp] = v;
  __syncthreads();
  T r = red[0];
  for (int w = 1; w < kRowWarps; ++w) r = op(r, red[w]);
  __syncthreads();  // red is reused by the next call
  return r;
}

// Inclusive prefix sum over the block in thread order; *total = the block's sum (equal, bit for
// bit, to the last thread's prefix).
__device__ double block_scan(double v, double* red, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 1; off < 32; off <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += y;
  }
  if (lane == 31) red[warp] = v;
  __syncthreads();
  double prefix = 0.0;
  for (int w = 0; w < warp; ++w) prefix += red[w];
  double sum = 0.0;
  for (int w = 0; w < kRowWarps - 1; ++w) sum += red[w];
  *total = sum + red[kRowWarps - 1];
  __syncthreads();
  return prefix + v;
}

struct Plus {
  __device__ double operator()(double x, double y) const { return x + y; }
};
struct Min {
  __device__ int operator()(int x, int y) const { return x < y ? x : y; }
};

// argmax of a row, the lowest index among equal maxima (std::max_element).
__device__ int row_argmax(const float* lg, int vocab, float* red_v, int* red_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float best = -INFINITY;
  int best_i = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kRowThreads) {
    const float x = lg[i];
    if (x > best || best_i == INT_MAX) {  // ascending i per thread: strict > keeps the first
      best = x;
      best_i = i;
    }
  }
  auto better = [](float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); };
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, off);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, off);
    if (better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  if (lane == 0) {
    red_v[warp] = best;
    red_i[warp] = best_i;
  }
  __syncthreads();
  best = red_v[0];
  best_i = red_i[0];
  for (int w = 1; w < kRowWarps; ++w)
    if (better(red_v[w], red_i[w], best, best_i)) {
      best = red_v[w];
      best_i = red_i[w];
    }
  __syncthreads();
  return best_i;
}

__global__ void __launch_bounds__(kRowThreads)
    greedy_kernel(const float* logits, int64_t ld, int vocab, int32_t* tokens) {
  __shared__ float red_v[kRowWarps];
  __shared__ int red_i[kRowWarps];
  const int best = row_argmax(logits + blockIdx.x * ld, vocab, red_v, red_i);
  if (threadIdx.x == 0) tokens[blockIdx.x] = best;
}

__global__ void __launch_bounds__(kRowThreads) sample_rows_kernel(const SampleArgs a, const uint64_t* sorted, int ib) {
  __shared__ double red_d[kRowWarps];
  __shared__ float red_v[kRowWarps];
  __shared__ int red_i[kRowWarps];
  __shared__ double s_mass, s_r;
  const int row = blockIdx.x, tid = threadIdx.x, vocab = a.vocab;
  const SamplingRow p = a.params[row];
  if (p.temperature == 0.f) {
    const int best = row_argmax(a.logits + row * a.ld, vocab, red_v, red_i);
    if (tid == 0) a.tokens[row] = best;
    return;
  }
  const uint64_t* keys = sorted + static_cast<int64_t>(row) * vocab;
  auto logit = [&](int i) { return static_cast<double>(logit_of(static_cast<uint32_t>(keys[i] >> ib))); };
  const int K = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  const double mx = logit(0), temp = p.temperature;
  auto weight = [&](int i) { return exp((logit(i) - mx) / temp); };  // the CPU's expression, in double

  double z = 0.0;
  for (int i = tid; i < K; i += kRowThreads) z += weight(i);
  z = block_reduce(z, red_d, Plus());
  const double floor = static_cast<double>(p.min_p) * (1.0 / z);  // min_p · prob[0] (weight(0) = 1)

  // E = how many candidates survive top-p then min-p; mass = their probability.
  int E = K;
  if (p.top_p < 1.f) {
    // Top-p needs the running sum in order: walk a tile of kRowThreads candidates at a time.
    double carry = 0.0;
    bool found = false;
    for (int base = 0; base < K && !found; base += kRowThreads) {
      const int i = base + tid;
      const double pr = i < K ? weight(i) / z : 0.0;
      double tile_total;
      const double cum = carry + block_scan(pr, red_d, &tile_total);
      int stop = INT_MAX;
      if (i < K) {
        if (cum >= static_cast<double>(p.top_p)) stop = i + 1;
        if (p.min_p > 0.f && i >= 1 && pr < floor) stop = min(stop, i);
      }
      stop = block_reduce(stop, red_i, Min());
      if (stop != INT_MAX) {
        E = stop;
        found = true;
        if (E - 1 < base) {  // cut at the tile's first candidate: the mass is everything before it
          if (tid == 0) s_mass = carry;
        } else if (i == E - 1) {
          s_mass = cum;
        }
      }
      carry += tile_total;
    }
    if (!found && tid == 0) s_mass = carry;
    __syncthreads();
  } else {
    if (p.min_p > 0.f) {  // the first candidate (after the top one) under the floor ends the prefix
      int stop = INT_MAX;
      for (int i = 1 + tid; i < K; i += kRowThreads)
        if (weight(i) / z < floor) {
          stop = i;
          break;
        }
      stop = block_reduce(stop, red_i, Min());
      E = min(E, stop);
    }
    double mass = 0.0;
    for (int i = tid; i < E; i += kRowThreads) mass += weight(i) / z;
    mass = block_reduce(mass, red_d, Plus());
    if (tid == 0) s_mass = mass;
    __syncthreads();
  }

  // One draw, exactly Rng::uniform() of the CPU sampler: r = U · mass.
  if (tid == 0) {
    uint64_t* st = a.rng_states + static_cast<int64_t>(row) * 4;
    uint64_t s[4] = {st[0], st[1], st[2], st[3]};
    const double u = static_cast<double>(xoshiro_next(s) >> 11) * 0x1.0p-53;
    for (int k = 0; k < 4; ++k) st[k] = s[k];
    s_r = u * s_mass;
  }
  __syncthreads();
  const double r = s_r;
  // The first candidate whose running sum passes r (the CPU's r −= prob[i] until r < 0).
  int chosen = E - 1;
  double carry = 0.0;
  for (int base = 0; base < E; base += kRowThreads) {
    const int i = base + tid;
    const double pr = i < E ? weight(i) / z : 0.0;
    double tile_total;
    const double cum = carry + block_scan(pr, red_d, &tile_total);
    const int first = block_reduce((i < E && cum > r) ? i : INT_MAX, red_i, Min());
    if (first != INT_MAX) {
      chosen = first;
      break;
    }
    carry += tile_total;
  }
  if (tid == 0) a.tokens[row] = static_cast<int32_t>(keys[chosen] & ((uint64_t{1} << ib) - 1));
}

int bits_for(int64_t max_value) {  // bits needed to hold 0..max_value
  int b = 0;
  while (b < 63 && (int64_t{1} << b) <= max_value) ++b;
  return b;
}

}  // namespace

Status sampling_rng_init(const uint64_t* seeds, const int64_t* draws, uint64_t* states, int batch, void* stream) {
  if (batch < 0) return invalid_argument("sampling_rng_init: batch must be >= 0");
  if (batch == 0) return Status::Ok();
  if (!seeds) return invalid_argument("sampling_rng_init: seeds is null");
  if (!states) return invalid_argument("sampling_rng_init: states is null");
  rng_init_kernel<<<(batch + 127) / 128, 128, 0, detail::as_stream(stream)>>>(seeds, draws, states, batch);
  return detail::launch_status("sampling_rng_init");
}

Status sample_greedy(const float* logits, int64_t ld, int batch, int vocab, int32_t* tokens, void* stream) {
  auto bad = [](const char* what) { return invalid_argument(std::string("sample_greedy: ") + what); };
  if (batch < 0) return bad("batch must be >= 0");
  if (batch == 0) return Status::Ok();
  if (vocab <= 0) return bad("vocab must be > 0");
  if (ld < vocab) return bad("ld must be >= vocab");
  if (!logits) return bad("logits is null");
  if (!tokens) return bad("tokens is null");
  greedy_kernel<<<batch, kRowThreads, 0, detail::as_stream(stream)>>>(logits, ld, vocab, tokens);
  return detail::launch_status("sample_greedy");
}

Status sample_tokens(const SampleArgs& a, void* stream) {
  auto bad = [](const char* what) { return invalid_argument(std::string("sample_tokens: ") + what); };
  if (a.batch < 0) return bad("batch must be >= 0");
  if (a.batch == 0) return Status::Ok();
  if (a.vocab <= 0) return bad("vocab must be > 0");
  if (a.ld < a.vocab) return bad("ld must be >= vocab");
  if (!a.logits) return bad("logits is null");
  if (!a.params) return bad("params is null");
  if (!a.rng_states) return bad("rng_states is null");
  if (!a.tokens) return bad("tokens is null");
  const int ib = bits_for(a.vocab - 1), rb = bits_for(a.batch - 1);
  const int64_t total = static_cast<int64_t>(a.batch) * a.vocab;
  if (32 + ib + rb > 64 || total >= (int64_t{1} << 31))
    return bad("batch * vocab too large for one sort (split the batch)");
  const int end_bit = 32 + ib + rb;
  cudaStream_t s = detail::as_stream(stream);

  size_t temp_bytes = 0;
  YOCO_CUDA_RETURN_IF_ERROR(detail::cuda_status(
      cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr),
                                     static_cast<uint64_t*>(nullptr), static_cast<int>(total), 0, end_bit, s),
      "sample_tokens: sort size"));
  const size_t key_bytes = static_cast<size_t>(total) * sizeof(uint64_t);
  const size_t key_span = (key_bytes + 255) / 256 * 256;
  auto buf = detail::scratch(stream, detail::ScratchSlot::kSamplingKeys, 2 * key_span + temp_bytes);
  if (!buf.ok()) return buf.status();
  auto* base = static_cast<unsigned char*>(*buf);
  auto* keys_in = reinterpret_cast<uint64_t*>(base);
  auto* keys_out = reinterpret_cast<uint64_t*>(base + key_span);
  void* temp = base + 2 * key_span;

  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 8192));
  make_keys_kernel<<<blocks, 256, 0, s>>>(a.logits, a.ld, a.vocab, ib, total, keys_in);
  YOCO_CUDA_RETURN_IF_ERROR(detail::launch_status("sample_tokens (keys)"));
  YOCO_CUDA_RETURN_IF_ERROR(detail::cuda_status(
      cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys_in, keys_out, static_cast<int>(total), 0, end_bit, s),
      "sample_tokens: sort"));
  sample_rows_kernel<<<a.batch, kRowThreads, 0, s>>>(a, keys_out, ib);
  return detail::launch_status("sample_tokens (rows)");
}

}  // namespace yoco::cuda
