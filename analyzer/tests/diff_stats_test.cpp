// The statistics behind diff verdicts, checked against independent computations (brute-force permutation
// enumeration and the textbook normal approximation, computed in Python when these tests were written).
#include <catch2/catch.hpp>

#include <cmath>

#include "diff/stats.h"

using namespace stepscope::analyzer;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("quantile uses linear interpolation (numpy's default)") {
  CHECK(stats::quantile({1, 2, 3, 4}, 0.5) == 2.5);
  CHECK_THAT(stats::quantile({10, 1, 7, 3, 5}, 0.9), WithinAbs(8.8, 1e-12));  // sorted 1 3 5 7 10: 7 + 0.6*3
  CHECK(stats::quantile({4}, 0.9) == 4);
  CHECK(std::isnan(stats::quantile({}, 0.5)));
}

TEST_CASE("Mann-Whitney exact p-values match brute-force enumeration, ties included") {
  // Complete separation, 5 vs 5: 2 / C(10,5).
  auto r = stats::mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  CHECK(r.exact);
  CHECK(r.u == 0);
  CHECK_THAT(r.p, WithinRel(0.007936507936507936, 1e-9));
  // Ties across the samples (midranks).
  r = stats::mann_whitney({1, 2, 2, 3, 5}, {2, 4, 4, 6, 7, 8});
  CHECK(r.u == 5);
  CHECK_THAT(r.p, WithinRel(0.06926406926406926, 1e-9));
  r = stats::mann_whitney({3.1, 2.2, 5.5, 4.0, 1.0, 2.2}, {2.2, 6.0, 4.0, 7.5});
  CHECK(r.u == 5.5);
  CHECK_THAT(r.p, WithinRel(0.20476190476190476, 1e-9));
  // The ProfilerStep durations (ms) of kineto resnet50 num_workers=4 vs num_workers=0, all six steps: the
  // slow first step of the base run keeps a +39% median shift from significance at 0.05.
  r = stats::mann_whitney({181.6, 123.9, 126.8, 126.3, 163.5, 116.1}, {176.1, 174.0, 176.9, 181.3, 176.5, 164.3});
  CHECK(r.u == 6);
  CHECK_THAT(r.p, WithinRel(0.06493506493506493, 1e-9));
  // Symmetric in its arguments.
  CHECK_THAT(stats::mann_whitney({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}).p, WithinRel(0.007936507936507936, 1e-9));
}

TEST_CASE("Mann-Whitney normal approximation with tie correction for large samples") {
  std::vector<double> x, y;
  for (int i = 0; i < 50; ++i) x.push_back(i);
  for (int i = 0; i < 60; ++i) y.push_back(i + 10.5);
  auto r = stats::mann_whitney(x, y);
  CHECK_FALSE(r.exact);
  CHECK(r.u == 780);
  CHECK_THAT(r.p, WithinRel(1.5662411802782196e-05, 1e-6));
  x.clear(), y.clear();
  for (int i = 0; i < 60; ++i) x.push_back(i / 3);
  for (int i = 0; i < 45; ++i) y.push_back(i / 3 + 2);
  r = stats::mann_whitney(x, y);
  CHECK(r.u == 1417.5);
  CHECK_THAT(r.p, WithinRel(0.6639579775181484, 1e-6));
}

TEST_CASE("Mann-Whitney degenerate inputs give p = 1") {
  CHECK(stats::mann_whitney({}, {1, 2}).p == 1);
  CHECK(stats::mann_whitney({0, 0, 0}, {0, 0}).p == 1);
  CHECK(stats::mann_whitney({1, 2, 3}, {1, 2, 3}).p == 1);
}

TEST_CASE("exact and normal paths agree near the switch-over size") {
  // 40 vs 40 (exact) against the same data through the normal formula computed by hand.
  std::vector<double> x, y;
  for (int i = 0; i < 40; ++i) x.push_back(i * 1.0), y.push_back(i * 1.0 + 7.25);
  auto r = stats::mann_whitney(x, y);
  CHECK(r.exact);
  double n = 40, m = 40, N = 80;
  double z = (std::fabs(r.u - n * m / 2) - 0.5) / std::sqrt(n * m / 12 * (N + 1));
  CHECK_THAT(r.p, WithinRel(std::erfc(z / std::sqrt(2.0)), 0.1));  // 0.00848 exact vs 0.00899
}

TEST_CASE("min attainable p and Holm adjustment") {
  CHECK_THAT(stats::min_attainable_p(5, 5), WithinRel(2.0 / 252, 1e-12));
  CHECK_THAT(stats::min_attainable_p(3, 3), WithinRel(2.0 / 20, 1e-12));
  CHECK(stats::min_attainable_p(0, 4) == 1);
  auto adj = stats::holm_adjust({0.01, 0.04, 0.03, 0.2});
  // sorted 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08→0.09 (monotone), 0.2*1=0.2
  CHECK_THAT(adj[0], WithinAbs(0.04, 1e-12));
  CHECK_THAT(adj[2], WithinAbs(0.09, 1e-12));
  CHECK_THAT(adj[1], WithinAbs(0.09, 1e-12));
  CHECK_THAT(adj[3], WithinAbs(0.2, 1e-12));
  CHECK(stats::holm_adjust({0.5, 0.6})[1] == 1.0);
}

TEST_CASE("seeded bootstrap intervals are reproducible and cover a known shift") {
  stats::SplitMix64 rng(7);
  std::vector<double> x, y;
  for (int i = 0; i < 40; ++i) x.push_back(100 + rng.normal());
  for (int i = 0; i < 40; ++i) y.push_back(110 + rng.normal());
  auto diff_of_means = [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
    double a = 0, b = 0;
    for (size_t i : ix) a += x[i];
    for (size_t i : iy) b += y[i];
    return b / double(iy.size()) - a / double(ix.size());
  };
  auto c1 = stats::bootstrap_interval(x.size(), y.size(), diff_of_means, 42);
  auto c2 = stats::bootstrap_interval(x.size(), y.size(), diff_of_means, 42);
  REQUIRE(c1.valid);
  CHECK(c1.lo == c2.lo);
  CHECK(c1.hi == c2.hi);
  CHECK(c1.lo < 10);
  CHECK(c1.hi > 10);
  CHECK(c1.lo > 9);
  CHECK(c1.hi < 11);
  CHECK_FALSE(stats::bootstrap_interval(0, 3, diff_of_means, 1).valid);
}

TEST_CASE("bootstrap p-value and interval agree: p < 0.05 exactly when the 95% interval excludes 0") {
  // 100 seeded pairs of samples, sizes 5..40, shifted by 0 to 4 standard errors either way: clear changes, no
  // change and many near the edge (p between 0.02 and 0.1). Both directions of the equivalence are counted.
  stats::SplitMix64 rng(48);
  int excluded = 0, included = 0, borderline = 0;
  for (int pair = 0; pair < 100; ++pair) {
    const size_t n = 5 + rng.below(36), m = 5 + rng.below(36);
    const double sd = 1 + 9 * rng.uniform();
    const double se = sd * std::sqrt(1.0 / double(n) + 1.0 / double(m));
    const double shift = (rng.uniform() * 4.0) * se * (pair % 2 ? 1 : -1);
    std::vector<double> x, y;
    for (size_t i = 0; i < n; ++i) x.push_back(100 + sd * rng.normal());
    for (size_t i = 0; i < m; ++i) y.push_back(100 + shift + sd * rng.normal());
    // Alternate the statistics the diff uses: a difference of means and a ratio of medians minus 1.
    stats::BootstrapStatistic stat = [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
      double a = 0, b = 0;
      for (size_t i : ix) a += x[i];
      for (size_t i : iy) b += y[i];
      return b / double(iy.size()) - a / double(ix.size());
    };
    if (pair % 3 == 0)
      stat = [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
        std::vector<double> a, b;
        for (size_t i : ix) a.push_back(x[i]);
        for (size_t i : iy) b.push_back(y[i]);
        return stats::median(b) / stats::median(a) - 1.0;
      };
    const auto t = stats::bootstrap_test(n, m, stat, 1000 + uint64_t(pair), 2000);
    REQUIRE(t.ci.valid);
    const bool excludes = t.ci.lo > 0 || t.ci.hi < 0;
    INFO("pair " << pair << ": p=" << t.p << " CI " << t.ci.lo << " .. " << t.ci.hi);
    CHECK((t.p < 0.05) == excludes);
    (excludes ? excluded : included)++;
    borderline += t.p > 0.02 && t.p < 0.1;
  }
  CHECK(excluded >= 20);
  CHECK(included >= 20);
  CHECK(borderline >= 10);
}

TEST_CASE("bootstrap p-value on resamples at the interval's edge") {
  // 0 at the 2.5% quantile of 41 values -1, 0, 1 .. 39, up to rounding (0.025 * 40 is 1 + 1e-15): p is 0.05
  // within rounding, on the side the interval shows.
  std::vector<double> v;
  for (int i = -1; i < 40; ++i) v.push_back(i);
  auto t = stats::percentile_test(v);
  CHECK_THAT(t.ci.lo, WithinAbs(0, 1e-12));
  CHECK_THAT(t.p, WithinAbs(0.05, 1e-9));
  CHECK((t.p < 0.05) == (t.ci.lo > 0));
  // Just above 0: the interval excludes it, p just below 0.05.
  for (auto& x : v) x += 1e-6;
  t = stats::percentile_test(v);
  CHECK(t.ci.lo > 0);
  CHECK(t.p < 0.05);
  // Every resample above 0: p is bounded by their count, never 0.
  t = stats::percentile_test(std::vector<double>(100, 3.0));
  CHECK(t.p == Approx(0.01));
  // All at 0, or spread around it: p 1 and near 1.
  CHECK(stats::percentile_test(std::vector<double>(50, 0.0)).p == 1);
  CHECK_FALSE(stats::percentile_test({1, 2}).ci.valid);
}
