#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "kernels/cpu/ops.h"

#if defined(YOCO_HAVE_CBLAS)
extern "C" void openblas_set_num_threads(int);
#endif

namespace yoco::cpu {
namespace {

int read_topology(int cpu, const char* field) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + field);
  int v = -1;
  return in >> v ? v : -1;
}

}  // namespace

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Two CPUs are hyperthreads of one core when they share (package, core id).
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const int package = read_topology(cpu, "physical_package_id"), core = read_topology(cpu, "core_id");
    if (core < 0) return CPU_COUNT(&set);  // no topology: count CPUs
    cores.insert({package, core});
  }
  return cores.empty() ? 1 : static_cast<int>(cores.size());
}

int default_threads() {
  // An explicit OMP_NUM_THREADS is the user's choice; otherwise one thread per physical core.
  static const int n = std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : physical_cores();
  return n;
}

void set_num_threads(int n) {
  if (n <= 0) n = default_threads();
  omp_set_num_threads(n);
#if defined(YOCO_HAVE_CBLAS)
  openblas_set_num_threads(n);
#endif
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace yoco::cpu
