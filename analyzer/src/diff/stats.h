// Small statistics for comparing per-step distributions: quantiles, the Mann–Whitney U test with an
// exact p-value (ties included) for small samples, Holm's step-down correction and a seeded bootstrap.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace stepscope::analyzer::stats {

// Linear-interpolation quantile (type 7, as numpy's default) of `v`; q in [0,1]. NaN for empty input.
double quantile(std::vector<double> v, double q);
inline double median(const std::vector<double>& v) { return quantile(v, 0.5); }

struct MannWhitney {
  double u = 0;        // U statistic of the first sample (pairs x > y, ties counted 1/2)
  double p = 1;        // two-sided p-value
  bool exact = false;  // exact permutation distribution (else normal approximation with tie correction)
};

// Two-sided Mann–Whitney U test (Wilcoxon rank-sum). Exact conditional distribution of the rank sum
// given the observed ties when n+m <= kExactLimit, else the normal approximation with tie and
// continuity correction. p = 1 when either sample is empty or every value is tied.
inline constexpr size_t kExactLimit = 80;
MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y);

// Smallest two-sided p-value the test can reach for sample sizes n and m (no ties): 2 / C(n+m, n).
double min_attainable_p(size_t n, size_t m);

// Holm–Bonferroni step-down adjusted p-values (same order as the input), capped at 1.
std::vector<double> holm_adjust(const std::vector<double>& p);

// Deterministic 64-bit generator (SplitMix64), so a seed gives the same intervals on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  // Uniform double in [0, 1).
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box–Muller).
  double normal();

 private:
  uint64_t state_;
};

struct Interval {
  double lo = 0, hi = 0;
  bool valid = false;
};

// Percentile bootstrap interval of statistic(indexes into x, indexes into y): each call gets n and m indexes
// drawn with replacement from [0,n) and [0,m) (so paired per-step values stay together). level 0.95 gives
// the 2.5% and 97.5% percentiles. Invalid when a side is empty.
using BootstrapStatistic = std::function<double(const std::vector<size_t>&, const std::vector<size_t>&)>;
Interval bootstrap_interval(size_t n, size_t m, const BootstrapStatistic& statistic, uint64_t seed,
                            int resamples = 2000, double level = 0.95);

// The percentile interval above and the two-sided p-value of "the statistic is 0" from the same resamples,
// by inverting the interval: p is the smallest 1 - level whose interval still reaches 0, so p < 1 - level
// exactly when the interval at `level` excludes 0 (a p-value beside an interval that disagrees with it
// misleads). p is floored at 1 / resamples where no resample reaches 0. p = 1 and the interval invalid when a
// side is empty.
struct BootstrapTest {
  Interval ci;
  double p = 1;
};
BootstrapTest bootstrap_test(size_t n, size_t m, const BootstrapStatistic& statistic, uint64_t seed,
                             int resamples = 2000, double level = 0.95);
// The same on given resampled values (what bootstrap_test computes them from).
BootstrapTest percentile_test(std::vector<double> values, double level = 0.95);

}  // namespace stepscope::analyzer::stats
