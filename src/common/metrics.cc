#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>

namespace nvdra::common {

using internal::MetricCell;
using internal::MetricFamily;
using internal::MetricType;

namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metrics: %s\n", message.c_str());
  std::abort();
}

bool IsMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

bool IsLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void AppendEscapedHelp(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void AppendEscapedLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// `{a="x",b="y"}` from (name, value) pairs already in output order, plus an
// optional trailing le pair; nothing when there are no pairs at all.
void AppendLabels(std::string& out, const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                  const std::string* le) {
  if (pairs.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [name, value] : pairs) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    AppendEscapedLabelValue(out, value);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

void AppendSample(std::string& out, std::string_view name, std::string_view suffix,
                  const std::vector<std::pair<std::string_view, std::string_view>>& pairs, const std::string* le,
                  std::string_view value) {
  out += name;
  out += suffix;
  AppendLabels(out, pairs, le);
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) Die("ExponentialBuckets needs start > 0, factor > 1, count >= 1");
  std::vector<double> buckets;
  buckets.reserve(static_cast<std::size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i) {
    buckets.push_back(bound);
    bound *= factor;
  }
  return buckets;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits in exponent form first: its exponent decides
  // the notation, as in Go's %g with shortest precision (which uses 6 as the
  // precision for that decision).
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  if (ec != std::errc()) Die("to_chars failed");
  std::string scientific(buffer, end);
  const std::size_t e = scientific.find('e');
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  if (exponent < -4 || exponent >= 6) return scientific;  // "1e+06", "2.5e-07", as Go writes them
  auto [fixed_end, fixed_ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed);
  if (fixed_ec != std::errc()) Die("to_chars failed");
  return std::string(buffer, fixed_end);
}

namespace internal {

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type,
                           std::vector<std::string> label_names, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

MetricCell* MetricFamily::Series(std::vector<std::string> label_values) {
  if (label_values.size() != label_names_.size()) {
    Die(name_ + ": " + std::to_string(label_values.size()) + " label values for " +
        std::to_string(label_names_.size()) + " labels");
  }
  MutexLock lock(mu_);
  auto [it, inserted] = series_.try_emplace(std::move(label_values));
  if (inserted) {
    it->second = std::make_unique<MetricCell>();
    if (type_ == MetricType::kHistogram) it->second->buckets.assign(bounds_.size(), 0);
  }
  return it->second.get();
}

void MetricFamily::Render(std::string& out) const {
  MutexLock lock(mu_);
  if (series_.empty()) return;  // as client_golang: no series, no HELP/TYPE either

  // Label pairs are written sorted by name; series sorted by their values in
  // that order.
  std::vector<std::size_t> order(label_names_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return label_names_[a] < label_names_[b]; });
  std::vector<std::pair<std::vector<std::string_view>, const MetricCell*>> rows;
  rows.reserve(series_.size());
  for (const auto& [values, cell] : series_) {
    std::vector<std::string_view> sorted;
    sorted.reserve(order.size());
    for (std::size_t index : order) sorted.push_back(values[index]);
    rows.emplace_back(std::move(sorted), cell.get());
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  out += "# HELP ";
  out += name_;
  out += ' ';
  AppendEscapedHelp(out, help_);
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += TypeName(type_);
  out += '\n';

  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  for (const auto& [values, cell] : rows) {
    pairs.clear();
    for (std::size_t i = 0; i < order.size(); ++i) pairs.emplace_back(label_names_[order[i]], values[i]);
    if (type_ != MetricType::kHistogram) {
      AppendSample(out, name_, "", pairs, nullptr, FormatMetricValue(cell->value));
      continue;
    }
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += cell->buckets[i];
      const std::string le = FormatMetricValue(bounds_[i]);
      AppendSample(out, name_, "_bucket", pairs, &le, std::to_string(cumulative));
    }
    const std::string inf = "+Inf";
    AppendSample(out, name_, "_bucket", pairs, &inf, std::to_string(cell->count));
    AppendSample(out, name_, "_sum", pairs, nullptr, FormatMetricValue(cell->value));
    AppendSample(out, name_, "_count", pairs, nullptr, std::to_string(cell->count));
  }
}

}  // namespace internal

void Counter::Inc(double delta) {
  if (delta < 0) Die(family_->name() + ": a counter cannot decrease");
  MutexLock lock(family_->mutex());
  cell_->value += delta;
}

double Counter::Value() const {
  MutexLock lock(family_->mutex());
  return cell_->value;
}

void Gauge::Set(double value) {
  MutexLock lock(family_->mutex());
  cell_->value = value;
}

void Gauge::Add(double delta) {
  MutexLock lock(family_->mutex());
  cell_->value += delta;
}

double Gauge::Value() const {
  MutexLock lock(family_->mutex());
  return cell_->value;
}

void Histogram::Observe(double value) {
  const std::vector<double>& bounds = family_->bounds();
  // First bound >= value: Prometheus buckets are "less than or equal".
  const auto index = static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  MutexLock lock(family_->mutex());
  if (index < bounds.size()) ++cell_->buckets[index];
  ++cell_->count;
  cell_->value += value;
}

std::uint64_t Histogram::Count() const {
  MutexLock lock(family_->mutex());
  return cell_->count;
}

double Histogram::Sum() const {
  MutexLock lock(family_->mutex());
  return cell_->value;
}

std::uint64_t Histogram::CumulativeCount(double upper_bound) const {
  if (std::isinf(upper_bound) && upper_bound > 0) return Count();
  const std::vector<double>& bounds = family_->bounds();
  const auto it = std::find(bounds.begin(), bounds.end(), upper_bound);
  if (it == bounds.end()) Die(family_->name() + ": no bucket with upper bound " + FormatMetricValue(upper_bound));
  const auto end = static_cast<std::size_t>(it - bounds.begin()) + 1;
  MutexLock lock(family_->mutex());
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < end; ++i) cumulative += cell_->buckets[i];
  return cumulative;
}

Counter CounterFamily::WithLabels(std::vector<std::string> label_values) {
  return Counter(family_, family_->Series(std::move(label_values)));
}

Gauge GaugeFamily::WithLabels(std::vector<std::string> label_values) {
  return Gauge(family_, family_->Series(std::move(label_values)));
}

Histogram HistogramFamily::WithLabels(std::vector<std::string> label_values) {
  return Histogram(family_, family_->Series(std::move(label_values)));
}

CounterFamily MetricsRegistry::AddCounter(std::string name, std::string help, std::vector<std::string> label_names) {
  return CounterFamily(Add(std::move(name), std::move(help), MetricType::kCounter, std::move(label_names), {}));
}

GaugeFamily MetricsRegistry::AddGauge(std::string name, std::string help, std::vector<std::string> label_names) {
  return GaugeFamily(Add(std::move(name), std::move(help), MetricType::kGauge, std::move(label_names), {}));
}

HistogramFamily MetricsRegistry::AddHistogram(std::string name, std::string help,
                                              std::vector<std::string> label_names, std::vector<double> buckets) {
  if (buckets.empty()) Die(name + ": a histogram needs at least one bucket");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i - 1] < buckets[i]))) {
      Die(name + ": bucket bounds must be finite and strictly increasing");
    }
  }
  return HistogramFamily(
      Add(std::move(name), std::move(help), MetricType::kHistogram, std::move(label_names), std::move(buckets)));
}

MetricFamily* MetricsRegistry::Add(std::string name, std::string help, MetricType type,
                                   std::vector<std::string> label_names, std::vector<double> buckets) {
  if (!IsMetricName(name)) Die("invalid metric name \"" + name + "\"");
  for (std::size_t i = 0; i < label_names.size(); ++i) {
    const std::string& label = label_names[i];
    if (!IsLabelName(label)) Die(name + ": invalid label name \"" + label + "\"");
    if (type == MetricType::kHistogram && label == "le") Die(name + ": \"le\" is reserved for histogram buckets");
    for (std::size_t j = 0; j < i; ++j) {
      if (label_names[j] == label) Die(name + ": label \"" + label + "\" given twice");
    }
  }
  MutexLock lock(mu_);
  if (auto it = families_.find(name); it != families_.end()) {
    const MetricFamily& existing = *it->second;
    if (existing.type() != type || existing.help() != help || existing.label_names() != label_names ||
        existing.bounds() != buckets) {
      Die("metric \"" + name + "\" registered twice with different definitions");
    }
    return it->second.get();
  }
  auto family = std::make_unique<MetricFamily>(name, std::move(help), type, std::move(label_names), std::move(buckets));
  MetricFamily* raw = family.get();
  families_.emplace(std::move(name), std::move(family));
  return raw;
}

std::string MetricsRegistry::Render() const {
  std::string out;
  MutexLock lock(mu_);
  for (const auto& [name, family] : families_) family->Render(out);
  return out;
}

}  // namespace nvdra::common
