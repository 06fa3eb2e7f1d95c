#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace yoco {

namespace {

void atomic_add(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape_help(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

std::string label_set(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + escape_label(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + escape_label(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

bool name_char(char c, bool first, bool colon_ok) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon_ok && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

}  // namespace

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, true)) return false;
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, false)) return false;
  return true;
}

void Counter::inc(double v) {
  if (v < 0) return;  // counters never go down
  atomic_add(value_, v);
}

void Gauge::inc(double v) { atomic_add(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // le semantics
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(acc);
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  s.count = acc;  // consistent with the buckets even while observations race in
  return s;
}

std::vector<double> Histogram::latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

template <class M>
M& Family<M>::with(const std::vector<std::string>& values) {
  YOCO_CHECK(values.size() == label_names_.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = children_[values];
  if (!slot) {
    if constexpr (std::is_same_v<M, Histogram>) slot = std::make_unique<M>(buckets_);
    else slot = std::make_unique<M>();
  }
  return *slot;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Status MetricsRegistry::check_new(const std::string& name, const std::vector<std::string>& label_names,
                                  MetricType type) const {
  if (!valid_metric_name(name)) return invalid_argument("metric name \"" + name + "\" is not valid");
  if (type == MetricType::kCounter && (name.size() < 6 || name.substr(name.size() - 6) != "_total"))
    return invalid_argument("counter \"" + name + "\" must end in _total");
  for (const auto& l : label_names) {
    if (!valid_label_name(l)) return invalid_argument("metric \"" + name + "\": label name \"" + l + "\" is not valid");
    if (type == MetricType::kHistogram && l == "le")
      return invalid_argument("histogram \"" + name + "\": label \"le\" is reserved");
  }
  YOCO_CHECK(entries_.find(name) == entries_.end());  // registering a name twice is a bug
  return Status::Ok();
}

template <class M>
Result<Family<M>*> MetricsRegistry::add_family(const std::string& name, const std::string& help,
                                               std::vector<std::string> label_names, MetricType type,
                                               std::unique_ptr<Family<M>> Entry::*slot, std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  YOCO_RETURN_IF_ERROR(check_new(name, label_names, type));
  Entry& e = entries_[name];
  e.type = type;
  e.help = help;
  e.*slot = std::make_unique<Family<M>>(std::move(label_names), std::move(buckets));
  return (e.*slot).get();
}

Result<Family<Counter>*> MetricsRegistry::counter_family(const std::string& name, const std::string& help,
                                                         std::vector<std::string> label_names) {
  return add_family(name, help, std::move(label_names), MetricType::kCounter, &Entry::counters);
}

Result<Family<Gauge>*> MetricsRegistry::gauge_family(const std::string& name, const std::string& help,
                                                     std::vector<std::string> label_names) {
  return add_family(name, help, std::move(label_names), MetricType::kGauge, &Entry::gauges);
}

Result<Family<Histogram>*> MetricsRegistry::histogram_family(const std::string& name, const std::string& help,
                                                             std::vector<double> buckets,
                                                             std::vector<std::string> label_names) {
  for (size_t i = 0; i < buckets.size(); ++i)
    if (!std::isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1]))
      return invalid_argument("histogram \"" + name + "\": buckets must be finite and increasing");
  return add_family(name, help, std::move(label_names), MetricType::kHistogram, &Entry::histograms, std::move(buckets));
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help) {
  auto f = counter_family(name, help);
  YOCO_CHECK(f.ok());
  return (*f)->with({});
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help) {
  auto f = gauge_family(name, help);
  YOCO_CHECK(f.ok());
  return (*f)->with({});
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
  auto f = histogram_family(name, help, std::move(buckets));
  YOCO_CHECK(f.ok());
  return (*f)->with({});
}

std::string MetricsRegistry::expose() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& entry : entries_) {
    const std::string& name = entry.first;  // plain references: clang 14 cannot capture bindings
    const Entry& e = entry.second;
    const char* type = e.type == MetricType::kCounter ? "counter"
                       : e.type == MetricType::kGauge ? "gauge"
                                                      : "histogram";
    out += "# HELP " + name + " " + escape_help(e.help) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    if (e.counters) {
      e.counters->for_each([&](const auto& values, const Counter& c) {
        out += name + label_set(e.counters->label_names(), values) + " " + format_value(c.value()) + "\n";
      });
    } else if (e.gauges) {
      e.gauges->for_each([&](const auto& values, const Gauge& g) {
        out += name + label_set(e.gauges->label_names(), values) + " " + format_value(g.value()) + "\n";
      });
    } else {
      e.histograms->for_each([&](const auto& values, const Histogram& h) {
        const auto s = h.snapshot();
        const auto& ln = e.histograms->label_names();
        for (size_t i = 0; i < s.upper_bounds.size(); ++i)
          out += name + "_bucket" + label_set(ln, values, "le", format_value(s.upper_bounds[i])) + " " +
                 std::to_string(s.cumulative[i]) + "\n";
        out +=
            name + "_bucket" + label_set(ln, values, "le", "+Inf") + " " + std::to_string(s.cumulative.back()) + "\n";
        out += name + "_sum" + label_set(ln, values) + " " + format_value(s.sum) + "\n";
        out += name + "_count" + label_set(ln, values) + " " + std::to_string(s.count) + "\n";
      });
    }
  }
  return out;
}

[[gnu::noipa]] std::string metric_name(const char* name) { return name; }

}  // namespace yoco
