#include <omp.h>

#include <thread>

#include "kernels/cpu/ops.h"

#if defined(YOCO_HAVE_CBLAS)
extern "C" void openblas_set_num_threads(int);
#endif

namespace yoco::cpu {

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);
#if defined(YOCO_HAVE_CBLAS)
  openblas_set_num_threads(n);
#endif
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace yoco::cpu
