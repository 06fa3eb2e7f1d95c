// Helpers shared by the unit tests: temp dirs, files, golden paths, max-difference checks.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"

namespace yoco::test {

// Sanitized builds (scripts/sanitize.sh) run several times slower: the tests' time bounds and the
// timeouts they give the code under test stretch this much there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr double kSanitizerSlowdown = 5;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr double kSanitizerSlowdown = 5;
#else
inline constexpr double kSanitizerSlowdown = 1;
#endif
#else
inline constexpr double kSanitizerSlowdown = 1;
#endif

// n samples of N(0, scale²) from a seeded generator: the same values for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A directory removed (with its contents) when the object goes away, also on test failure.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "yoco-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

// $YOCO_SOURCE_DIR, when set, replaces the build's path (tests run from a copied tree, e.g. on a
// device machine: bench/gpu/pack.sh).
inline std::string source_dir() {
  const char* e = std::getenv("YOCO_SOURCE_DIR");
  return e && *e ? e : YOCO_SOURCE_DIR;
}
inline std::string goldens_dir() { return source_dir() + "/tests/reference/goldens"; }

inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline std::vector<double> flatten(const Json& j) {
  std::vector<double> out;
  if (j.is_number()) {
    out.push_back(j.as_double());
  } else if (j.is_array()) {
    for (const auto& e : j.as_array()) {
      auto sub = flatten(e);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  }
  return out;
}

}  // namespace yoco::test
