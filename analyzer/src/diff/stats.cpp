#include "diff/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace stepscope::analyzer::stats {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  q = std::clamp(q, 0.0, 1.0);
  double pos = q * double(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - double(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

namespace {

// Midranks of the pooled sample, doubled so they are integers (a tie group over ranks 3 and 4 gets 7).
struct Ranked {
  std::vector<int64_t> doubled_rank;  // per pooled element: first x's, then y's
  std::vector<int64_t> tie_sizes;     // size of every tie group
};

Ranked rank_pooled(const std::vector<double>& x, const std::vector<double>& y) {
  size_t n = x.size(), N = x.size() + y.size();
  std::vector<std::pair<double, size_t>> all;
  all.reserve(N);
  for (size_t i = 0; i < n; ++i) all.emplace_back(x[i], i);
  for (size_t j = 0; j < y.size(); ++j) all.emplace_back(y[j], n + j);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Ranked r;
  r.doubled_rank.assign(N, 0);
  for (size_t i = 0; i < N;) {
    size_t j = i;
    while (j + 1 < N && all[j + 1].first == all[i].first) ++j;
    // ranks i+1 .. j+1 share their mean; doubled: (i+1)+(j+1)
    int64_t dr = static_cast<int64_t>(i + 1 + j + 1);
    for (size_t k = i; k <= j; ++k) r.doubled_rank[all[k].second] = dr;
    r.tie_sizes.push_back(static_cast<int64_t>(j - i + 1));
    i = j + 1;
  }
  return r;
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y) {
  MannWhitney out;
  size_t n = x.size(), m = y.size(), N = n + m;
  if (n == 0 || m == 0) return out;
  for (double v : x)
    if (!std::isfinite(v)) return out;
  for (double v : y)
    if (!std::isfinite(v)) return out;
  Ranked r = rank_pooled(x, y);
  int64_t r1_doubled = 0;
  for (size_t i = 0; i < n; ++i) r1_doubled += r.doubled_rank[i];
  double r1 = double(r1_doubled) / 2.0;
  out.u = r1 - double(n) * double(n + 1) / 2.0;
  if (r.tie_sizes.size() == 1) {  // every value tied: no evidence of any difference
    out.p = 1;
    out.exact = true;
    return out;
  }

  if (N <= kExactLimit) {
    // Exact conditional distribution of the doubled rank sum of a random subset of size k, where k is the
    // smaller side (the rank sum of either side determines the other's).
    size_t k = std::min(n, m);
    int64_t observed = 0;
    if (k == n) {
      observed = r1_doubled;
    } else {
      for (size_t j = 0; j < m; ++j) observed += r.doubled_rank[n + j];
    }
    int64_t max_sum = 0;
    {
      std::vector<int64_t> sorted = r.doubled_rank;
      std::sort(sorted.rbegin(), sorted.rend());
      for (size_t i = 0; i < k; ++i) max_sum += sorted[i];
    }
    // ways[c][s]: subsets of c elements with doubled-rank sum s. double: C(80,40) ~ 1e23 loses only the
    // last bits, far below what a p-value needs.
    std::vector<std::vector<double>> ways(k + 1, std::vector<double>(max_sum + 1, 0.0));
    ways[0][0] = 1.0;
    int64_t prefix = 0;  // sum of the ranks seen so far bounds every reachable sum
    for (size_t e = 0; e < N; ++e) {
      int64_t w = r.doubled_rank[e];
      prefix += w;
      int64_t hi = std::min(max_sum, prefix);
      size_t cmax = std::min(k, e + 1);
      for (size_t c = cmax; c >= 1; --c) {
        double* dst = ways[c].data();
        const double* src = ways[c - 1].data();
        for (int64_t s = hi; s >= w; --s) dst[s] += src[s - w];
      }
    }
    // E[doubled sum] = k (N + 1); two-sided: outcomes at least as far from the mean as observed.
    int64_t mean2 = static_cast<int64_t>(k) * static_cast<int64_t>(N + 1);  // exact integer
    int64_t dev = std::llabs(observed - mean2);
    double total = 0, extreme = 0;
    for (int64_t s = 0; s <= max_sum; ++s) {
      double c = ways[k][s];
      if (c == 0) continue;
      total += c;
      if (std::llabs(s - mean2) >= dev) extreme += c;
    }
    out.p = total > 0 ? std::min(1.0, double(extreme / total)) : 1.0;
    out.exact = true;
    return out;
  }

  double mu = double(n) * double(m) / 2.0;
  double tie_term = 0;
  for (int64_t t : r.tie_sizes) tie_term += double(t) * double(t) * double(t) - double(t);
  double var = double(n) * double(m) / 12.0 * ((double(N) + 1.0) - tie_term / (double(N) * (double(N) - 1.0)));
  if (var <= 0) {
    out.p = 1;
    return out;
  }
  double z = (std::fabs(out.u - mu) - 0.5) / std::sqrt(var);
  if (z < 0) z = 0;
  out.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return out;
}

double min_attainable_p(size_t n, size_t m) {
  if (n == 0 || m == 0) return 1.0;
  // 2 / C(n+m, n) computed in logs to stay finite.
  double log_c = std::lgamma(double(n + m) + 1) - std::lgamma(double(n) + 1) - std::lgamma(double(m) + 1);
  return std::min(1.0, 2.0 * std::exp(-log_c));
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  size_t k = p.size();
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adj(k, 1.0);
  double running = 0;
  for (size_t i = 0; i < k; ++i) {
    double v = std::min(1.0, p[order[i]] * double(k - i));
    running = std::max(running, v);  // adjusted p-values never decrease along the order
    adj[order[i]] = running;
  }
  return adj;
}

double SplitMix64::normal() {
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

BootstrapTest percentile_test(std::vector<double> values, double level) {
  BootstrapTest out;
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  if (values.size() < 10) return out;
  std::sort(values.begin(), values.end());
  const double tail = (1.0 - level) / 2.0;
  out.ci.lo = quantile(values, tail);
  out.ci.hi = quantile(values, 1.0 - tail);
  out.ci.valid = true;
  // quantile() interpolates linearly between order statistics, so q -> quantile(q) is continuous and
  // nondecreasing. below: the largest q with quantile(q) <= 0 (the interval's low end stays above 0 exactly
  // when tail > below); above: 1 - the smallest q with quantile(q) >= 0, the same for the high end.
  const size_t B = values.size();
  const double last = double(B - 1);
  auto below = [&]() {
    size_t k =
        size_t(std::upper_bound(values.begin(), values.end(), 0.0) - values.begin());  // values[<k] <= 0
    if (k == 0) return 0.0;
    if (k == B) return 1.0;
    const double a = values[k - 1], b = values[k];  // a <= 0 < b
    return (double(k - 1) + (0.0 - a) / (b - a)) / last;
  }();
  auto above = [&]() {
    size_t j =
        size_t(std::lower_bound(values.begin(), values.end(), 0.0) - values.begin());  // values[>=j] >= 0
    if (j == B) return 0.0;
    if (j == 0) return 1.0;
    const double a = values[j - 1], b = values[j];  // a < 0 <= b
    return 1.0 - (double(j - 1) + (0.0 - a) / (b - a)) / last;
  }();
  // The interval at level L excludes 0 iff (1-L)/2 > below or (1-L)/2 > above: iff 1-L > 2 min(below, above).
  out.p = std::min(1.0, 2.0 * std::min(below, above));
  // No resample reached 0: the resamples bound p by their count, never prove it 0.
  // (kept below 1 - level, so it never disagrees with the interval however few the resamples).
  if (out.p <= 0) out.p = std::min(1.0 / double(B), (1.0 - level) / 2.0);
  // At the very edge rounding decides (0.025 * 40 is not exactly 1): side with the interval as it is shown.
  const double alpha = 1.0 - level;
  const bool excludes = out.ci.lo > 0 || out.ci.hi < 0;
  // (1 - 0.95 is 0.05 + 4e-17: a p just under it must also be under the 0.05 people compare it with.)
  if (excludes && out.p >= alpha * (1 - 1e-9)) out.p = alpha * (1 - 1e-9);
  if (!excludes && out.p < alpha) out.p = alpha;
  return out;
}

BootstrapTest bootstrap_test(size_t n, size_t m, const BootstrapStatistic& statistic, uint64_t seed,
                             int resamples, double level) {
  if (n == 0 || m == 0 || resamples < 10) return {};
  SplitMix64 rng(seed);
  std::vector<double> values;
  values.reserve(static_cast<size_t>(resamples));
  std::vector<size_t> ix(n), iy(m);
  for (int b = 0; b < resamples; ++b) {
    for (auto& v : ix) v = rng.below(n);
    for (auto& v : iy) v = rng.below(m);
    values.push_back(statistic(ix, iy));
  }
  return percentile_test(std::move(values), level);
}

Interval bootstrap_interval(size_t n, size_t m, const BootstrapStatistic& statistic, uint64_t seed,
                            int resamples, double level) {
  return bootstrap_test(n, m, statistic, seed, resamples, level).ci;
}

}  // namespace stepscope::analyzer::stats
