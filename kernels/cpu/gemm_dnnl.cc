// oneDNN matmul for the large products (bench/README.md "GEMM roof": OpenBLAS follows
// OPENBLAS_CORETYPE, oneDNN JIT-selects AVX-512 / AVX512-BF16 / AMX from the CPU it runs on).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

#if defined(YOCO_HAVE_DNNL)
#include <oneapi/dnnl/dnnl_version.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace yoco::cpu {

namespace {

enum class Lib { kDnnl, kBlas, kReference };

Lib choose_library() {
  const char* env = std::getenv("YOCO_GEMM_LIBRARY");
  const bool blas = gemm_uses_blas();
#if defined(YOCO_HAVE_DNNL)
  if (!env || std::strcmp(env, "onednn") == 0) return Lib::kDnnl;
#endif
  if (env && std::strcmp(env, "reference") == 0) return Lib::kReference;
  return blas ? Lib::kBlas : Lib::kReference;
}

Lib library() {
  static const Lib lib = choose_library();
  return lib;
}

}  // namespace

bool dnnl_enabled() { return library() == Lib::kDnnl; }

const char* gemm_library() {
  switch (library()) {
    case Lib::kDnnl:
      return "onednn";
    case Lib::kBlas:
      return "openblas";
    default:
      return "reference";
  }
}

#if defined(YOCO_HAVE_DNNL)

namespace {

// One product's shape: primitives are JIT-compiled for exact sizes and strides, so each distinct
// shape is built once (a model has a handful: its projections × the chunk and tail row counts).
// All members 4 bytes wide, so the struct has no padding and memcmp / byte hashing are exact.
struct Key {
  int m, n, k, lda, ldb, ldc, threads;
  int b_trans, bf16;
  float alpha, beta;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};
static_assert(sizeof(Key) == 11 * 4, "Key must have no padding");
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(&k);
    for (size_t i = 0; i < sizeof(Key); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// YOCO_CPU_ISA=avx2|base narrows oneDNN's JIT the same way as our own kernels (vec.h), so a run
// on an AVX-512 machine takes the whole path of an AVX2-only (or SSE) one: fp32 products on AVX2
// kernels and no bf16 matmul (bench/README.md, the AVX2 engine). Takes effect only before oneDNN's
// first kernel, which is why the cache's engine is made after it.
bool cap_dnnl_isa() {
  switch (vec::isa()) {
    case vec::Isa::kAvx2:
      return dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) == dnnl::status::success;
    case vec::Isa::kBase:
      return dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41) == dnnl::status::success;
    default:
      return true;
  }
}

struct Cache {
  bool isa_capped = cap_dnnl_isa();
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> prims;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: products may run during static teardown
  return *c;
}

constexpr size_t kMaxPrimitives = 512;

std::shared_ptr<const Entry> primitive(const Key& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.prims.find(key);
  if (it != c.prims.end()) return it->second;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const dt in = key.bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc a_md(dims{key.m, key.k}, in, dims{key.lda, 1});
  dnnl::memory::desc b_md(dims{key.k, key.n}, in, key.b_trans ? dims{1, key.ldb} : dims{key.ldb, 1});
  dnnl::memory::desc c_md(dims{key.m, key.n}, dt::f32, dims{key.ldc, 1});
  dnnl::primitive_attr attr;
#if DNNL_VERSION_MAJOR < 3
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
#endif
  if (key.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(key.beta);
    attr.set_post_ops(po);
  }
  if (c.prims.size() >= kMaxPrimitives) c.prims.clear();
  std::shared_ptr<const Entry> p;
  try {
#if DNNL_VERSION_MAJOR < 3
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, c.eng);
#else
    dnnl::matmul::primitive_desc pd(c.eng, a_md, b_md, c_md, attr);
#endif
    p = std::make_shared<const Entry>(Entry{pd, dnnl::matmul(pd)});
  } catch (const dnnl::error&) {
    // No kernel for this CPU (bf16 below AVX-512): remembered as null, the caller's path runs.
  }
  c.prims.emplace(key, p);
  return p;
}

bool run(const Key& key, const void* a, const void* b, float* c) {
  std::shared_ptr<const Entry> p = primitive(key);
  if (!p) return false;
  Cache& cc = cache();
  thread_local dnnl::stream stream(cc.eng);
  dnnl::memory am(p->pd.src_desc(), cc.eng, const_cast<void*>(a));
  dnnl::memory bm(p->pd.weights_desc(), cc.eng, const_cast<void*>(b));
  dnnl::memory cm(p->pd.dst_desc(), cc.eng, c);
  p->prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
  return true;
}

}  // namespace

bool gemm_dnnl(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
               float beta, float* c, int ldc) {
  // Inside our own parallel regions (per-head products, one expert per thread) the caller's path
  // runs, one thread each. Any region counts, also a team of one thread (omp_in_parallel() is
  // false there): else one thread and several would run different libraries, whose sums differ
  // on AVX2 (MoeExperts.ThreadCountDoesNotChangeTheResult).
  if (!dnnl_enabled() || omp_get_level() > 0 || m <= 0 || n <= 0 || k <= 0) return false;
#if DNNL_VERSION_MAJOR >= 3
  if (alpha != 1.0f) return false;  // oneDNN 3 takes scales as run-time arguments: not wired up
#endif
  return run(Key{m, n, k, lda, ldb, ldc, omp_get_max_threads(), b_trans, false, alpha, beta}, a, b, c);
}

bool gemm_dnnl_bf16(int m, int n, int k, const bf16* a, int lda, const bf16* w, int ldw, float beta, float* c,
                    int ldc) {
  if (!dnnl_enabled() || omp_get_level() > 0 || m <= 0 || n <= 0 || k <= 0) return false;
  return run(Key{m, n, k, lda, ldw, ldc, omp_get_max_threads(), true, true, 1.0f, beta}, a, w, c);
}

bool dnnl_bf16_supported() {
  static const bool ok = dnnl_enabled() && primitive(Key{32, 32, 32, 32, 32, 32, 1, true, true, 1.0f, 0.0f}) != nullptr;
  return ok;
}

#else

bool dnnl_bf16_supported() { return false; }
bool gemm_dnnl(int, int, int, float, const float*, int, const float*, int, bool, float, float*, int) { return false; }
bool gemm_dnnl_bf16(int, int, int, const bf16*, int, const bf16*, int, float, float*, int) { return false; }

#endif

}  // namespace yoco::cpu
