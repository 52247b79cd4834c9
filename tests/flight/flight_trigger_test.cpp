// TriggerEvaluator (collector/src/flight/flight_trigger.h): when a step or a data wait fires a flight save.
#include <catch2/catch.hpp>

#include "flight/flight_trigger.h"

using stepscope::collector::flight::TriggerEvaluator;
using stepscope::collector::flight::TriggerSettings;

namespace {
constexpr int64_t kMs = 1000000;

// Steps of `ms` each from `t`, numbered from `index`; returns the indices that fired.
std::vector<int64_t> feed(TriggerEvaluator& e, const std::string& source, int64_t& index, int64_t& t,
                          const std::vector<int64_t>& ms) {
  std::vector<int64_t> fired;
  for (int64_t d : ms) {
    if (auto tr = e.on_step(source, index, t, t + d * kMs)) fired.push_back(tr->step);
    t += d * kMs;
    ++index;
  }
  return fired;
}
}  // namespace

TEST_CASE("a step slower than k times the running median fires once, after the warm-up") {
  TriggerSettings s;  // 3x, 20 warm-up steps, 10 per hour
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0;
  std::vector<int64_t> warm(20, 10);
  warm[5] = 500;  // in the warm-up: never judged
  CHECK(feed(e, "optimizer", i, t, warm).empty());
  CHECK(feed(e, "optimizer", i, t, {10, 29, 31}) == std::vector<int64_t>{22});  // 31 > 3 x 10; 29 is not
  auto tr = e.on_step("optimizer", 23, t, t + 500 * kMs);
  REQUIRE(tr);
  CHECK(tr->kind == "slow-step");
  CHECK(tr->median_ns == 10 * kMs);
  CHECK(tr->steps_judged == 23);
  CHECK(tr->detail() == "step 23 took 500.0 ms, 50.0x the median 10.0 ms of the 23 steps before it");
}

TEST_CASE("the median follows the steps before: a trainer that slows down for good stops firing") {
  TriggerSettings s;
  s.max_per_hour = 1000;
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(30, 10));
  const auto fired = feed(e, "optimizer", i, t, std::vector<int64_t>(100, 40));
  // The k-th 40 ms step is judged against 30 steps of 10 ms and k of 40 ms: it fires while the median is 10
  // ms (k < 30), never after.
  REQUIRE(fired.size() == 30);
  CHECK(fired.front() == 30);
  CHECK(fired.back() == 59);
}

TEST_CASE("two step sources marking the same slow interval, and a data wait inside it, fire once") {
  TriggerSettings s;
  s.data_wait_ns = 100 * kMs;
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0, j = 0, u = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(25, 10));
  feed(e, "dataloader", j, u, std::vector<int64_t>(25, 10));
  CHECK(e.on_data_wait("dataloader", t + 1 * kMs, t + 400 * kMs));  // the first to see it fires
  CHECK(!e.on_step("optimizer", 25, t, t + 410 * kMs));
  CHECK(!e.on_step("dataloader", 25, t + 2 * kMs, t + 411 * kMs));
  CHECK(e.on_step("optimizer", 26, t + 410 * kMs, t + 900 * kMs));  // the next slow step is a new interval
  CHECK(!e.on_data_wait("dataloader", 0, 50 * kMs));                // under the limit
}

TEST_CASE("at most max_per_hour automatic saves in any hour, the rest counted") {
  TriggerSettings s;
  s.max_per_hour = 2;
  s.warmup_steps = 0;
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0;
  std::vector<int64_t> pattern;
  for (int k = 0; k < 5; ++k) {
    for (int n = 0; n < 10; ++n) pattern.push_back(10);
    pattern.push_back(200);
  }
  CHECK(feed(e, "api", i, t, pattern) == std::vector<int64_t>{10, 21});
  CHECK(e.suppressed() == 3);
  t += 3600LL * 1000 * kMs;  // an hour later the limit has room again
  CHECK(feed(e, "api", i, t, {10, 10, 300}).size() == 1);
}

TEST_CASE("slow-step off and data-wait off never fire") {
  TriggerSettings s;
  s.slow_step_factor = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0;
  std::vector<int64_t> steps(40, 10);
  steps.push_back(10000);
  CHECK(feed(e, "api", i, t, steps).empty());
  CHECK(!e.on_data_wait("dataloader", 0, 100000 * kMs));
}

TEST_CASE("a step must also be min_excess over the median: a preempted short step is not a stall") {
  TriggerEvaluator e(TriggerSettings{});  // 3x and 50 ms over
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(30, 4));
  CHECK(feed(e, "optimizer", i, t, {12, 40, 53}).empty());              // 3x, 10x, 13x: at most 49 ms over
  CHECK(feed(e, "optimizer", i, t, {54}) == std::vector<int64_t>{33});  // 50 ms over: fires
}

TEST_CASE(
    "a step that paid for a GPU window's CUPTI switch is the profiler's, not judged nor in the median") {
  TriggerSettings settings;
  settings.min_excess_ns = 0;
  TriggerEvaluator e(settings);
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(30, 1));  // 1 ms steps
  e.exclude(t + 1 * kMs, t + 13 * kMs);                     // a re-attach of 12 ms inside the next step
  CHECK(feed(e, "optimizer", i, t, {14}).empty());
  CHECK(e.excluded_steps() == 1);
  CHECK(feed(e, "optimizer", i, t, {14}) ==
        std::vector<int64_t>{31});  // the same length without a switch fires
}

TEST_CASE("a trigger withdrawn (another process saved its interval) gives back its place in the hour's saves") {
  TriggerSettings s;
  s.max_per_hour = 1;
  s.warmup_steps = 0;
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(10, 10));
  auto first = e.on_step("optimizer", i++, t, t + 200 * kMs);
  REQUIRE(first);
  t += 200 * kMs;
  feed(e, "optimizer", i, t, std::vector<int64_t>(10, 10));
  // The hour's one save is taken: the next slow step is held back.
  CHECK(!e.on_step("optimizer", i++, t, t + 200 * kMs));
  CHECK(e.suppressed() == 1);
  t += 200 * kMs;
  e.withdraw(*first);
  feed(e, "optimizer", i, t, std::vector<int64_t>(10, 10));
  CHECK(e.on_step("optimizer", i++, t, t + 200 * kMs));
}

TEST_CASE("the profiler's intervals that touch are kept as one: a long save does not push out the GPU switches") {
  TriggerSettings settings;
  settings.min_excess_ns = 0;
  TriggerEvaluator e(settings);
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(30, 1));
  e.exclude(t + 1 * kMs, t + 5 * kMs);  // a CUPTI switch in the next step
  // A part written in a hundred pieces right after it, each touching the one before: one interval.
  for (int k = 0; k < 100; ++k) e.exclude(t + (100 + k) * kMs, t + (101 + k) * kMs);
  CHECK(feed(e, "optimizer", i, t, {14}).empty());  // still excluded: the switch was not pushed out
  CHECK(e.excluded_steps() == 1);
  t += 100 * kMs - 14 * kMs;
  CHECK(feed(e, "optimizer", i, t, {50}).empty());  // inside the joined interval
  CHECK(e.excluded_steps() == 2);
}

TEST_CASE("a step is judged without the time it overlapped this process's save: a real stall still fires") {
  TriggerSettings settings;  // 3x and 50 ms over
  TriggerEvaluator e(settings);
  int64_t i = 0, t = 0;
  feed(e, "optimizer", i, t, std::vector<int64_t>(30, 10));
  // A part written in [t + 5, t + 305] ms: the next step, stretched by it to 120 ms, is 20 ms without it.
  e.discount(t + 5 * kMs, t + 305 * kMs);
  CHECK(feed(e, "optimizer", i, t, {120}).empty());
  // The step after it overlaps the write's last 185 ms and sleeps 600 ms more: 615 ms without the write.
  auto tr = e.on_step("optimizer", i, t, t + 800 * kMs);
  REQUIRE(tr);
  CHECK(tr->step == 31);
  CHECK(tr->detail() == "step 31 took 800.0 ms, 80.0x the median 10.0 ms of the 31 steps before it");
  CHECK(e.excluded_steps() == 0);  // judged, not left out
}

TEST_CASE(
    "each thread's steps are judged against its own: a slower loop on another thread is not a slow step") {
  // Steps are sequences per source and thread: a data thread's 100 ms steps beside a 10 ms training loop were
  // judged against one median of both.
  TriggerSettings s;
  s.min_excess_ns = 0;
  TriggerEvaluator e(s);
  int64_t t = 0;
  std::vector<int64_t> fired;
  for (int64_t i = 0; i < 60; ++i) {
    if (auto tr = e.on_step("api", i, t, t + 10 * kMs, 7)) fired.push_back(tr->step);
    if (i % 5 == 4)
      if (auto tr = e.on_step("api", i / 5, t - 40 * kMs, t + 60 * kMs, 8)) fired.push_back(tr->step);
    t += 10 * kMs;
  }
  CHECK(fired.empty());
  // Thread 7's own slow step still fires.
  auto tr = e.on_step("api", 60, t, t + 50 * kMs, 7);
  REQUIRE(tr);
  CHECK(tr->step == 60);
}
