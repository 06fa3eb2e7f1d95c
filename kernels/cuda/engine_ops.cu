// The small ops that glue the GPU engine (model/cuda/cuda_engine.h) together: fp32 activations into the
// bf16 inputs of gemm_bf16, rows between per-sequence slots and the batch, K/V rows into the paged
// pool, and seeded random weights for benchmarks. All bandwidth-bound: grid-stride loops, fp32 math.
#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

using detail::as_bf16;

constexpr int kThreads = 256;

unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

__global__ void convert_to_bf16_kernel(const float* __restrict__ x, int ldx, __nv_bfloat16* __restrict__ y, int ldy,
                                       int rows, int cols) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    y[r * ldy + c] = __float2bfloat16_rn(x[r * ldx + c]);
  }
}

__global__ void copy_rows_kernel(const float* __restrict__ src, int64_t lds, const int32_t* __restrict__ src_rows,
                                 float* __restrict__ dst, int64_t ldd, const int32_t* __restrict__ dst_rows, int rows,
                                 int cols) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / cols);
    const int64_t c = i % cols;
    const int64_t rs = src_rows ? src_rows[r] : r, rd = dst_rows ? dst_rows[r] : r;
    dst[rd * ldd + c] = src[rs * lds + c];
  }
}

__global__ void kv_append_kernel(KvAppendArgs a) {
  const int64_t total = static_cast<int64_t>(a.rows) * a.kv_dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / a.kv_dim);
    const int c = static_cast<int>(i % a.kv_dim);
    const int64_t pos = a.positions[r];
    const int64_t slot = pos / a.block_size;
    if (pos < 0 || slot >= a.max_blocks) continue;  // host-validated; never write outside the table
    const int64_t table = a.row_tables ? a.row_tables[r] : 0;
    const int32_t block = a.block_tables[table * a.max_blocks + slot];
    if (block < 0 || block >= a.n_blocks) continue;
    const int64_t dst = (static_cast<int64_t>(block) * a.block_size + pos % a.block_size) * a.kv_dim + c;
    a.k_pool[dst] = a.k[static_cast<int64_t>(r) * a.ldk + c];
    a.v_pool[dst] = a.v[static_cast<int64_t>(r) * a.ldv + c];
  }
}

// splitmix64: a counter-based stream, so element i's value depends on (seed, i) alone.
__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void fill_normal_kernel(T* y, int64_t n, uint64_t seed, float mean, float stddev) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    // Two 24-bit uniforms; u1 in (0, 1] so the log is finite.
    const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((r >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    detail::store_f(y + i, mean + stddev * z);
  }
}

}  // namespace

Status convert_to_bf16(const float* x, int ldx, uint16_t* y, int ldy, int rows, int cols, void* stream) {
  const char* op = "convert_to_bf16";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (rows < 0 || cols < 0) return bad("rows and cols must be >= 0");
  if (rows == 0 || cols == 0) return Status::Ok();
  if (!x || !y) return bad("x and y must be set");
  if (ldx < cols || ldy < cols) return bad("ldx and ldy must be >= cols");
  convert_to_bf16_kernel<<<grid_for(static_cast<int64_t>(rows) * cols), kThreads, 0, detail::as_stream(stream)>>>(
      x, ldx, as_bf16(y), ldy, rows, cols);
  return detail::launch_status(op);
}

Status copy_rows(const float* src, int64_t lds, const int32_t* src_rows, float* dst, int64_t ldd,
                 const int32_t* dst_rows, int rows, int cols, void* stream) {
  const char* op = "copy_rows";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (rows < 0 || cols < 0) return bad("rows and cols must be >= 0");
  if (rows == 0 || cols == 0) return Status::Ok();
  if (!src || !dst) return bad("src and dst must be set");
  if (lds < cols || ldd < cols) return bad("lds and ldd must be >= cols");
  copy_rows_kernel<<<grid_for(static_cast<int64_t>(rows) * cols), kThreads, 0, detail::as_stream(stream)>>>(
      src, lds, src_rows, dst, ldd, dst_rows, rows, cols);
  return detail::launch_status(op);
}

Status kv_append_paged(const KvAppendArgs& a, void* stream) {
  const char* op = "kv_append_paged";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.rows < 0) return bad("rows must be >= 0");
  if (a.kv_dim <= 0) return bad("kv_dim must be > 0");
  if (a.block_size <= 0) return bad("block_size must be > 0");
  if (a.max_blocks <= 0) return bad("max_blocks must be > 0");
  if (a.n_blocks <= 0) return bad("n_blocks must be > 0");
  if (a.ldk < a.kv_dim || a.ldv < a.kv_dim) return bad("ldk and ldv must be >= kv_dim");
  if (a.rows == 0) return Status::Ok();
  if (!a.k || !a.v) return bad("k and v must be set");
  if (!a.k_pool || !a.v_pool) return bad("k_pool and v_pool must be set");
  if (!a.block_tables) return bad("block_tables is null");
  if (!a.positions) return bad("positions is null");
  kv_append_kernel<<<grid_for(static_cast<int64_t>(a.rows) * a.kv_dim), kThreads, 0, detail::as_stream(stream)>>>(a);
  return detail::launch_status(op);
}

Status fill_normal(void* y, DType type, int64_t n, uint64_t seed, float mean, float stddev, void* stream) {
  if (n < 0) return invalid_argument("fill_normal: n must be >= 0");
  if (n == 0) return Status::Ok();
  if (!y) return invalid_argument("fill_normal: y is null");
  cudaStream_t s = detail::as_stream(stream);
  switch (type) {
    case DType::kF32:
      fill_normal_kernel<float><<<grid_for(n), kThreads, 0, s>>>(static_cast<float*>(y), n, seed, mean, stddev);
      break;
    case DType::kBF16:
      fill_normal_kernel<__nv_bfloat16>
          <<<grid_for(n), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(y), n, seed, mean, stddev);
      break;
    default:
      return invalid_argument("fill_normal: type must be F32 or BF16");
  }
  return detail::launch_status("fill_normal");
}

}  // namespace yoco::cuda
