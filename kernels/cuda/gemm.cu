// bf16 GEMM through cuBLASLt (not hand-written). cuBLAS is column-major, and a row-major matrix is
// its transpose in column-major, so row-major C[m,n] = A·Bᵀ is computed as the column-major Cᵀ[n,m]
// = Bᵀ[n,k]·Aᵀ[k,m]: cuBLAS's "A" is our B read as [k,n] (ld k) with TRANSA = T, its "B" is our A
// read as [k,m] (ld k) with TRANSB = N, and C is [n,m] (ld n).
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper

Status lt_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return internal_error(std::string("gemm_bf16: ") + what + " failed (cublas status " +
                        std::to_string(static_cast<int>(st)) + ")");
}

// Largest power of two (≤ 256) dividing the address: the heuristic must not assume more.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// One handle per device, and the heuristic's first choice per (device, shape, output type,
// alignments, beta != 0), all created on first use and kept for the life of the process.
struct LtCache {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::tuple<int, int, int, int, int, uint32_t, uint32_t, uint32_t, bool>, cublasLtMatmulAlgo_t> algos;
};
LtCache& cache() {
  static auto* c = new LtCache();  // leaked on purpose: no teardown order issues with the driver
  return *c;
}

// RAII for the per-call descriptors (cheap to create; the expensive parts are cached above).
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Status gemm_bf16(const uint16_t* a, const uint16_t* b, void* c, DType c_type, int m, int n, int k, float alpha,
                 float beta, void* stream) {
  if (m < 0 || n < 0 || k < 0) return invalid_argument("gemm_bf16: m, n and k must be >= 0");
  if (m == 0 || n == 0) return Status::Ok();
  if (k == 0) return invalid_argument("gemm_bf16: k must be > 0");  // (beta·C alone is not worth a path)
  if (!a) return invalid_argument("gemm_bf16: a is null");
  if (!b) return invalid_argument("gemm_bf16: b is null");
  if (!c) return invalid_argument("gemm_bf16: c is null");
  if (c_type != DType::kF32 && c_type != DType::kBF16) return invalid_argument("gemm_bf16: c_type must be F32 or BF16");
  const cudaDataType_t ct = c_type == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;

  int dev = 0;
  if (Status st = detail::cuda_status(cudaGetDevice(&dev), "gemm_bf16: cudaGetDevice"); !st.ok()) return st;
  auto ws = detail::scratch(stream, detail::ScratchSlot::kGemmWorkspace, kWorkspaceBytes);
  if (!ws.ok()) return ws.status();
  size_t ws_bytes = kWorkspaceBytes;

  LtCache& cc = cache();
  cublasLtHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(cc.mu);
    auto it = cc.handles.find(dev);
    if (it == cc.handles.end()) {
      if (Status st = lt_status(cublasLtCreate(&handle), "cublasLtCreate"); !st.ok()) return st;
      cc.handles[dev] = handle;
    } else {
      handle = it->second;
    }
  }

  Descs d;
  const cublasOperation_t trans_t = CUBLAS_OP_T, trans_n = CUBLAS_OP_N;
  YOCO_CUDA_RETURN_IF_ERROR(
      lt_status(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate"));
  YOCO_CUDA_RETURN_IF_ERROR(lt_status(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_t, sizeof(trans_t)), "set TRANSA"));
  YOCO_CUDA_RETURN_IF_ERROR(lt_status(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_n, sizeof(trans_n)), "set TRANSB"));
  // cuBLAS "A" = the weight B ([k rows, n cols] col-major, ld k), "B" = the activations A.
  YOCO_CUDA_RETURN_IF_ERROR(lt_status(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, k, n, k), "layout(weights)"));
  YOCO_CUDA_RETURN_IF_ERROR(lt_status(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, k, m, k), "layout(activations)"));
  YOCO_CUDA_RETURN_IF_ERROR(lt_status(cublasLtMatrixLayoutCreate(&d.c, ct, n, m, n), "layout(output)"));

  const uint32_t al_a = alignment_of(a), al_b = alignment_of(b), al_c = alignment_of(c);
  const auto key = std::make_tuple(dev, m, n, k, static_cast<int>(c_type), al_a, al_b, al_c, beta != 0.f);
  cublasLtMatmulAlgo_t algo{};
  bool have_algo = false;
  {
    std::lock_guard<std::mutex> lock(cc.mu);
    auto it = cc.algos.find(key);
    if (it != cc.algos.end()) {
      algo = it->second;
      have_algo = true;
    }
  }
  if (!have_algo) {
    YOCO_CUDA_RETURN_IF_ERROR(lt_status(cublasLtMatmulPreferenceCreate(&d.pref), "PreferenceCreate"));
    YOCO_CUDA_RETURN_IF_ERROR(
        lt_status(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                       sizeof(ws_bytes)),
                  "set MAX_WORKSPACE_BYTES"));
    // Swapped as the matrices are: cuBLAS's A is our b, its B our a.
    const cublasLtMatmulPreferenceAttributes_t attrs[3] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES};
    const uint32_t als[3] = {al_b, al_a, al_c};
    for (int i = 0; i < 3; ++i)
      YOCO_CUDA_RETURN_IF_ERROR(lt_status(
          cublasLtMatmulPreferenceSetAttribute(d.pref, attrs[i], &als[i], sizeof(als[i])), "set MIN_ALIGNMENT"));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    YOCO_CUDA_RETURN_IF_ERROR(
        lt_status(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &found),
                  "AlgoGetHeuristic"));
    if (found == 0)
      return Status(StatusCode::kUnimplemented, "gemm_bf16: cuBLASLt has no algorithm for m=" + std::to_string(m) +
                                                    " n=" + std::to_string(n) + " k=" + std::to_string(k));
    algo = result.algo;
    std::lock_guard<std::mutex> lock(cc.mu);
    cc.algos[key] = algo;
  }
  return lt_status(cublasLtMatmul(handle, d.op, &alpha, b, d.a, a, d.b, &beta, c, d.c, c, d.c, &algo, *ws, ws_bytes,
                                  detail::as_stream(stream)),
                   "cublasLtMatmul");
}

}  // namespace yoco::cuda
