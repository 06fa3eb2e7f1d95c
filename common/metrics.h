// A Prometheus metrics registry with the data model of prometheus-cpp (counters, gauges,
// histograms, labelled families) and the text exposition format 0.0.4. Metrics are created
// once at start-up and updated lock-free; services wrap them in typed structs (observe_ttft(s)
// style) so call sites never look metrics up by string.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace yoco {

class Counter {
 public:
  void inc(double v = 1.0);  // v must be >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0);
  void dec(double v = 1.0) { inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted, finite; +Inf is implicit
  void observe(double v);
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

  // Buckets for latencies in seconds: 1 ms .. 60 s.
  static std::vector<double> latency_buckets();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, then +Inf (not cumulative)
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

// All metrics of one name: one child per combination of label values.
template <class M>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::vector<double> buckets = {})
      : label_names_(std::move(label_names)), buckets_(std::move(buckets)) {}
  // The child for these label values (created on first use; the reference stays valid).
  M& with(const std::vector<std::string>& values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, m] : children_) f(values, *m);
  }

 private:
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;
};

// A metric's name as a std::string, built out of line: a service's metrics.cc passes every name
// through it so each name stays one whole string literal in the binary, where the deploy check
// (tests/deploy/check_deploy.py) finds the names a binary exports. Inlined std::string
// construction lets the compiler split a literal into pieces.
std::string metric_name(const char* name);

class MetricsRegistry {
 public:
  // Registration validates names (INVALID_ARGUMENT) and aborts on a duplicate name, which is a
  // programming error. Counter names must end in _total, as Prometheus expects.
  Result<Family<Counter>*> counter_family(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names = {});
  Result<Family<Gauge>*> gauge_family(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names = {});
  Result<Family<Histogram>*> histogram_family(const std::string& name, const std::string& help,
                                              std::vector<double> buckets, std::vector<std::string> label_names = {});
  // Unlabelled shorthands; abort on an invalid name (they are compile-time constants).
  Counter& counter(const std::string& name, const std::string& help);
  Gauge& gauge(const std::string& name, const std::string& help);
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // Prometheus text format 0.0.4, metrics sorted by name.
  std::string expose() const;

 private:
  struct Entry {
    MetricType type;
    std::string help;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
  };
  Status check_new(const std::string& name, const std::vector<std::string>& label_names, MetricType type) const;
  template <class M>
  Result<Family<M>*> add_family(const std::string& name, const std::string& help, std::vector<std::string> label_names,
                                MetricType type, std::unique_ptr<Family<M>> Entry::*slot,
                                std::vector<double> buckets = {});

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

bool valid_metric_name(const std::string& name);
bool valid_label_name(const std::string& name);

}  // namespace yoco
