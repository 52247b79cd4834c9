#include "flight/flight_trigger.h"

#include <algorithm>
#include <cstdio>

namespace stepscope::collector::flight {
namespace {
constexpr int64_t kHourNs = 3600LL * 1000000000LL;
}

std::string Trigger::detail() const {
  char buf[256];
  const double ms = double(end_ns - start_ns) / 1e6;
  if (kind == "slow-step")
    std::snprintf(buf, sizeof buf,
                  "step %lld took %.1f ms, %.1fx the median %.1f ms of the %d steps before it",
                  (long long)step, ms, median_ns > 0 ? double(end_ns - start_ns) / double(median_ns) : 0.0,
                  double(median_ns) / 1e6, steps_judged);
  else if (step >= 0)
    std::snprintf(buf, sizeof buf, "a data wait (%s) of %.1f ms in step %lld", source.c_str(), ms,
                  (long long)step);
  else
    std::snprintf(buf, sizeof buf, "a data wait (%s) of %.1f ms", source.c_str(), ms);
  return buf;
}

std::optional<Trigger> TriggerEvaluator::on_step(const std::string& source, int64_t index, int64_t start_ns,
                                                 int64_t end_ns, int64_t tid) {
  int64_t dur = end_ns - start_ns;
  if (dur <= 0) return std::nullopt;
  for (const auto& [a, b] : discounted_)
    dur -= std::max<int64_t>(0, std::min(b, end_ns) - std::max(a, start_ns));
  dur = std::max<int64_t>(dur, 1);
  for (const auto& [a, b] : excluded_)
    if (a < end_ns && b > start_ns) {
      ++excluded_steps_;
      return std::nullopt;
    }
  Source& src = sources_[{source, tid}];
  std::optional<Trigger> fired;
  if (s_.slow_step_factor > 0 && src.seen >= s_.warmup_steps && !src.recent.empty()) {
    scratch_.assign(src.recent.begin(), src.recent.end());
    const size_t mid = scratch_.size() / 2;
    std::nth_element(scratch_.begin(), scratch_.begin() + std::ptrdiff_t(mid), scratch_.end());
    const int64_t median = scratch_[mid];
    if (median > 0 && double(dur) > s_.slow_step_factor * double(median) &&
        dur - median >= s_.min_excess_ns) {
      Trigger t;
      t.kind = "slow-step";
      t.step = index;
      t.source = source;
      t.start_ns = start_ns;
      t.end_ns = end_ns;
      t.median_ns = median;
      t.steps_judged = int(scratch_.size());
      fired = admit(std::move(t));
    }
  }
  ++src.seen;
  src.recent.push_back(dur);
  if (src.recent.size() > kMedianSteps) src.recent.pop_front();
  return fired;
}

namespace {
// Adds [start, end], joined with the last interval when they touch; keeps the last kMaxExcluded.
void add_interval(std::deque<std::pair<int64_t, int64_t>>& d, int64_t start_ns, int64_t end_ns) {
  if (!d.empty() && start_ns <= d.back().second && end_ns >= d.back().first) {
    d.back().first = std::min(d.back().first, start_ns);
    d.back().second = std::max(d.back().second, end_ns);
    return;
  }
  d.emplace_back(start_ns, end_ns);
  if (d.size() > kMaxExcluded) d.pop_front();
}
}  // namespace

void TriggerEvaluator::exclude(int64_t start_ns, int64_t end_ns) {
  add_interval(excluded_, start_ns, end_ns);
}

void TriggerEvaluator::discount(int64_t start_ns, int64_t end_ns) {
  add_interval(discounted_, start_ns, end_ns);
}

void TriggerEvaluator::withdraw(const Trigger& t) {
  auto it = std::find(fired_at_.begin(), fired_at_.end(), t.end_ns);
  if (it != fired_at_.end()) fired_at_.erase(it);
}

std::optional<Trigger> TriggerEvaluator::on_data_wait(const std::string& source, int64_t start_ns,
                                                      int64_t end_ns) {
  if (s_.data_wait_ns <= 0 || end_ns - start_ns <= s_.data_wait_ns) return std::nullopt;
  Trigger t;
  t.kind = "data-wait";
  t.source = source;
  t.start_ns = start_ns;
  t.end_ns = end_ns;
  return admit(std::move(t));
}

std::optional<Trigger> TriggerEvaluator::admit(Trigger t) {
  // The same slow interval seen by another step source (or a data wait inside the slow step): once.
  if (last_end_ >= 0 && t.start_ns < last_end_ && t.end_ns > last_start_) return std::nullopt;
  last_start_ = t.start_ns;
  last_end_ = t.end_ns;
  while (!fired_at_.empty() && t.end_ns - fired_at_.front() >= kHourNs) fired_at_.pop_front();
  if (s_.max_per_hour >= 0 && int(fired_at_.size()) >= s_.max_per_hour) {
    ++suppressed_;
    return std::nullopt;
  }
  fired_at_.push_back(t.end_ns);
  return t;
}

}  // namespace stepscope::collector::flight
