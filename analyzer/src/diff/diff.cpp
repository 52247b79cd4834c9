// The comparison itself: pools per-step values of every run on each side, applies threshold and
// significance per metric, lists kernel-level changes and findings that appeared or disappeared.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>

#include "diff/stats.h"
#include "format/units.h"
#include "stepscope/analyzer/correlation_index.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/graph_replays.h"

namespace stepscope::analyzer {

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::Regression: return "regression";
    case Verdict::Improvement: return "improvement";
    case Verdict::Unchanged:
    default: return "unchanged";
  }
}

const char* to_string(FindingDiff::Status s) {
  switch (s) {
    case FindingDiff::Status::Appeared: return "appeared";
    case FindingDiff::Status::Disappeared: return "disappeared";
    case FindingDiff::Status::Changed: return "changed";
    case FindingDiff::Status::Persisting:
    default: return "persisting";
  }
}

namespace {

// An eager run against its graph run (or two graph runs): what each side replayed from CUDA graphs, and whether
// its kernels inside the replays were recorded, so the kernel-by-kernel lists below read right.
void add_graph_notes(const std::vector<DiffRun>& base, const std::vector<DiffRun>& now, std::vector<std::string>& notes) {
  struct Side {
    int64_t graphs = 0, replays = 0, replayed = 0, records = 0, kernels = 0;
    bool whole = false;
  };
  auto side_of = [](const std::vector<DiffRun>& runs) {
    Side s;
    for (const auto& r : runs) {
      const GraphTable& g = r.analysis.graphs;
      s.graphs += int64_t(g.graphs.size()), s.replays += int64_t(g.replays.size());
      s.replayed += g.replayed_records, s.records += g.gpu_records, s.kernels += r.analysis.summary.kernels;
      for (const auto& x : g.graphs) s.whole |= x.whole;
    }
    return s;
  };
  const Side b = side_of(base), n = side_of(now);
  if (!b.replays && !n.replays) return;
  auto words = [](const char* name, const Side& s) {
    if (!s.replays) return fmt::format("{} launches its GPU work without CUDA graphs", name);
    if (s.whole)
      return fmt::format("{} replays {} CUDA graph{} {} times, each replay recorded as one interval (gpu.graph_records "
                         "= graph): the kernels inside were not recorded",
                         name, s.graphs, s.graphs == 1 ? "" : "s", s.replays);
    return fmt::format("{} replays {} CUDA graph{} {} times: {} of its {} GPU records ran inside them", name, s.graphs,
                       s.graphs == 1 ? "" : "s", s.replays, s.replayed, s.records);
  };
  notes.push_back(words("base", b) + "; " + words("new", n) + ".");
  if ((b.replays > 0) != (n.replays > 0)) {
    const Side& g = b.replays ? b : n;
    notes.push_back(g.whole ? std::string("the graph run's kernels are not in its recording (one interval per "
                                          "replay, named `CUDA graph N`): the kernel lists show them removed and the "
                                          "replays added; record the graph run with per-node graph records to "
                                          "compare it kernel by kernel")
                            : std::string("kernels are compared by name inside and outside graphs alike: what the "
                                          "graph run saves is in the gaps between them (launch idle), not in the "
                                          "kernels"));
  }
}

// Duration count and total by name of the items (kernels, op ranges) whose `when` (a kernel's launch, an op's
// start) lies inside one of the steps (all of them when there are no steps), largest total first.
// `demangle`: keyed by the demangled name, so a store's mangled kernel names meet a Kineto trace's demangled
// ones.
template <class Items, class Keep, class When>
std::vector<KernelStat> stats_by_name(const store::Trace& trace, const Items& items,
                                      const std::vector<StepBreakdown>& steps, Keep keep, When when,
                                      bool demangle) {
  std::vector<std::pair<int64_t, int64_t>> windows;
  for (const auto& s : steps)
    if (s.dur_ns > 0) windows.emplace_back(s.start_ns, s.start_ns + s.dur_ns);
  std::sort(windows.begin(), windows.end());
  auto inside = [&](int64_t t) {
    if (windows.empty()) return true;
    auto it = std::upper_bound(windows.begin(), windows.end(), std::make_pair(t, INT64_MAX));
    if (it == windows.begin()) return false;
    --it;
    return t >= it->first && t < it->second;
  };
  std::unordered_map<store::StringId, KernelStat> by_id;
  for (const auto& k : items) {
    if (!keep(k) || !inside(when(k))) continue;
    int64_t d = std::max<int64_t>(0, k.end - k.start);
    auto [it, fresh] = by_id.try_emplace(k.name);
    KernelStat& st = it->second;
    if (fresh) st.min_ns = d, st.max_ns = d;
    st.count += 1;
    st.total_ns += d;
    st.min_ns = std::min(st.min_ns, d);
    st.max_ns = std::max(st.max_ns, d);
  }
  // Different string ids may carry the same name after merges: key the result by name.
  std::map<std::string, KernelStat> by_name;
  for (auto& [id, st] : by_id) {
    const std::string name = demangle ? full_symbol(trace.str(id)) : trace.str(id);
    auto [it, fresh] = by_name.try_emplace(name, st);
    if (!fresh) {
      it->second.count += st.count;
      it->second.total_ns += st.total_ns;
      it->second.min_ns = std::min(it->second.min_ns, st.min_ns);
      it->second.max_ns = std::max(it->second.max_ns, st.max_ns);
    }
  }
  std::vector<KernelStat> out;
  out.reserve(by_name.size());
  for (auto& [name, st] : by_name) {
    st.name = name;
    out.push_back(std::move(st));
  }
  std::sort(out.begin(), out.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return out;
}

}  // namespace

std::vector<KernelStat> kernel_stats_by_name(const store::Trace& trace, const std::vector<StepBreakdown>& steps) {
  // A kernel belongs to the step that launched it, as the analysis counts a step's kernels: a queue that runs
  // behind the host ends its last steps' kernels after the last step (launch_bound_fused: 1,015 of 6,000),
  // and by their start they were not counted (dense_kernel 16.3 → 19.7 µs a step where it went 19.6 → 19.7).
  // Joined as the analysis joins them: by correlation id, the launching process's call where merged ranks'
  // ids collide.
  std::optional<CorrelationIndex> launches;
  if (!steps.empty()) launches.emplace(trace.api_calls);
  auto when = [&](const store::Kernel& k) {
    // Its own call not recorded: another process's of the same id is not its launch.
    const int64_t row = launches ? launches->find(k.correlation, k.pid) : -1;
    return row < 0 ? k.start : trace.api_calls[size_t(row)].start;
  };
  return stats_by_name(
      trace, trace.kernels, steps, [](const store::Kernel&) { return true; }, when, true);
}

std::vector<KernelStat> op_stats_by_name(const store::Trace& trace, const std::vector<StepBreakdown>& steps) {
  return stats_by_name(
      trace, trace.ranges, steps, [](const store::Range& r) { return r.source == store::RangeSource::Op; },
      [](const store::Range& r) { return r.start; }, false);
}

namespace {

// Per-step values of one side, pooled over its runs: every step's length and host data wait, and the GPU side
// of the steps whose CUDA activity was traced (all of them without GPU windows; an untraced step's GPU is
// unknown, not idle, as in analyze's shares).
struct StepSamples {
  std::vector<double> dur_us, data;                    // every step, in µs, paired by index
  std::vector<double> gpu_dur_us, busy, launch, sync;  // the traced steps, in µs, paired by index
  size_t size() const { return dur_us.size(); }
};

StepSamples pool_steps(const std::vector<DiffRun>& runs, const DiffConfig& cfg, DiffSide& side,
                       std::vector<std::string>& notes, const char* side_name) {
  StepSamples s;
  for (const auto& r : runs) {
    side.files.push_back(r.file);
    side.step_sources.push_back(r.analysis.summary.step_source);
    side.has_gpu = side.has_gpu || r.analysis.summary.has_gpu;
    // The program's pace: where the host runs ahead of the GPU, the steps in the GPU's time (analyze's rows then;
    // by the host's loop a GPU made 1.5x slower read "unchanged"), else each step less the profiler's own cost,
    // which analyze takes out too (launch_bound -> its CUDA graph read -76% where the unprofiled runs say -61%).
    const bool gpu_time = r.analysis.summary.host_runs_ahead && !r.analysis.gpu_steps.empty();
    if (gpu_time)
      notes.push_back(fmt::format("{}: {}: the host runs ahead of the GPU; its steps are compared in the GPU's time "
                                  "({:.3f} ms a step against {:.3f} ms on the host), the program's pace",
                                  side_name, r.file, r.analysis.summary.gpu_step_median_us / 1e3,
                                  r.analysis.summary.host_step_median_us / 1e3));
    if (auto note = malformed_events_note(r.analysis.summary); !note.empty())
      notes.push_back(fmt::format("{}: {}: {}", side_name, r.file, note));
    if (!gpu_time && r.analysis.summary.profiler.removed_us > 0)  // the GPU's steps carry no profiler cost
      notes.push_back(fmt::format("{}: {}: step times less the profiler's own cost, as analyze takes it out ({:.3f} "
                                  "ms in all)",
                                  side_name, r.file, r.analysis.summary.profiler.removed_us / 1e3));
    std::vector<const StepBreakdown*> steps;
    for (const auto& st : gpu_time ? r.analysis.gpu_steps : r.analysis.steps)
      if (st.dur_ns - st.profiler_ns > 0) steps.push_back(&st);
    size_t skip = 0;
    if (cfg.skip_first_steps > 0 && steps.size() >= static_cast<size_t>(cfg.skip_first_steps) + 2)
      skip = static_cast<size_t>(cfg.skip_first_steps);
    side.steps_dropped += static_cast<int64_t>(skip);
    if (cfg.skip_first_steps > 0 && skip == 0 && !steps.empty())  // the warm-up is in the figures: say so
      notes.push_back(
          fmt::format("{}: {}: {} step(s), too few to leave out the first {} as warm-up "
                      "(test.skip_first_steps needs {} or more); every step is compared",
                      side_name, r.file, steps.size(), cfg.skip_first_steps, cfg.skip_first_steps + 2));
    if (steps.empty()) notes.push_back(fmt::format("{}: {} has no steps with a duration; it adds nothing to the comparison",
                                                   side_name, r.file));
    for (size_t i = skip; i < steps.size(); ++i) {
      const auto* st = steps[i];
      s.dur_us.push_back(double(st->dur_ns - st->profiler_ns) / 1e3);
      // As the analyzer's summary.data_wait_share: all host time waiting for input (TF profiler's "input"),
      // of which data_wait_ns is the part with the GPU idle too.
      s.data.push_back(double(std::max(st->host_data_wait_ns, st->data_wait_ns)) / 1e3);
      if (!st->gpu_traced) continue;
      s.gpu_dur_us.push_back(double(st->dur_ns) / 1e3);  // the shares over the recorded steps, as analyze's
      s.busy.push_back(double(st->gpu_busy_ns) / 1e3);
      s.launch.push_back(double(st->launch_idle_ns) / 1e3);
      s.sync.push_back(double(st->sync_idle_ns) / 1e3);
    }
  }
  side.steps = static_cast<int64_t>(s.size());
  side.gpu_traced_steps = static_cast<int64_t>(s.gpu_dur_us.size());
  return s;
}

double pooled_share(const std::vector<double>& part, const std::vector<double>& dur, const std::vector<size_t>* ix) {
  double p = 0, d = 0;
  if (ix) {
    for (size_t i : *ix) p += part[i], d += dur[i];
  } else {
    for (size_t i = 0; i < dur.size(); ++i) p += part[i], d += dur[i];
  }
  return d > 0 ? p / d : std::nan("");
}

std::vector<double> pick(const std::vector<double>& v, const std::vector<size_t>& ix) {
  std::vector<double> out;
  out.reserve(ix.size());
  for (size_t i : ix) out.push_back(v[i]);
  return out;
}

int severity_rank(const std::string& level) {
  if (level == "low") return 0;
  if (level == "medium") return 1;
  if (level == "high") return 2;
  return 99;  // "none": nothing fails
}

struct FindingAgg {
  bool present = false;
  store::Severity severity = store::Severity::Low;
  double share = 0;
  std::string summary;
};

std::map<std::string, FindingAgg> aggregate_findings(const std::vector<DiffRun>& runs) {
  std::map<std::string, FindingAgg> out;
  for (const auto& r : runs)
    for (const auto& f : r.analysis.findings) {
      auto& a = out[f.rule];
      if (!a.present || int(f.severity) > int(a.severity) || (f.severity == a.severity && f.share > a.share)) {
        a.severity = f.severity;
        a.summary = f.summary;
      }
      a.share = std::max(a.share, f.share);
      a.present = true;
    }
  return out;
}

}  // namespace

namespace {

// Changes by name at one level (DiffRun::kernels or ::ops); see NameLevelDiff and
// DiffConfig::kernel_regression_us. `gpu_level`: kernels, which a recording holds only for the steps whose
// GPU was traced: per such step (a run traced in windows of 20 steps out of 200 against one traced whole
// showed each kernel 10x apart).
NameLevelDiff name_level_diff(const std::vector<DiffRun>& base, const std::vector<DiffRun>& now,
                              std::vector<KernelStat> DiffRun::*level, const DiffConfig& cfg,
                              bool gpu_level = false) {
  // Kernels and ops were counted over DiffRun::table_steps; the host functions over every step.
  const bool tables = level != &DiffRun::host_functions;
  auto per_side = [level, gpu_level, tables](const std::vector<DiffRun>& runs, double& steps) {
    std::map<std::string, KernelStat> agg;
    steps = 0;
    for (const auto& r : runs) {
      // Over the steps the tables were counted over (make_diff_run), else every step.
      size_t counted = tables && r.table_steps >= 0 ? size_t(r.table_steps) : r.analysis.steps.size();
      if (gpu_level)
        counted = tables && r.table_gpu_steps >= 0
                      ? size_t(r.table_gpu_steps)
                      : size_t(std::count_if(r.analysis.steps.begin(), r.analysis.steps.end(),
                                             [](const StepBreakdown& s) { return s.gpu_traced; }));
      steps += double(std::max<size_t>(1, counted));
      for (const auto& k : r.*level) {
        auto& a = agg[k.name];
        a.name = k.name;
        a.count += k.count;
        a.total_ns += k.total_ns;
      }
    }
    return agg;
  };
  auto fails = [&cfg](const KernelDiff& k) {
    if (cfg.kernel_regression_us <= 0) return false;
    const double delta = k.delta_us_per_step();
    return delta > cfg.kernel_regression_us && delta > cfg.kernel_regression_ratio * k.base_us_per_step;
  };
  double sb = 0, sn = 0;
  auto kb = per_side(base, sb), kn = per_side(now, sn);
  NameLevelDiff out;
  std::vector<KernelDiff>& both = out.changed;
  for (const auto& [name, k] : kb) {
    KernelDiff kd;
    kd.name = name;
    kd.base_us_per_step = double(k.total_ns) / 1e3 / sb;
    kd.base_count_per_step = double(k.count) / sb;
    auto it = kn.find(name);
    if (it != kn.end()) {
      kd.new_us_per_step = double(it->second.total_ns) / 1e3 / sn;
      kd.new_count_per_step = double(it->second.count) / sn;
      both.push_back(kd);
    } else {
      out.removed.push_back(kd);
    }
  }
  for (const auto& [name, k] : kn) {
    if (kb.count(name)) continue;
    KernelDiff kd;
    kd.name = name;
    kd.new_us_per_step = double(k.total_ns) / 1e3 / sn;
    kd.new_count_per_step = double(k.count) / sn;
    out.added.push_back(kd);
  }
  // Unchanged ones are not "changes".
  both.erase(std::remove_if(both.begin(), both.end(), [](const KernelDiff& k) { return k.delta_us_per_step() == 0; }),
             both.end());
  if (!tables) {
    // Sampled self time: a function's time per step is (its samples) × period / steps, and its samples a
    // Poisson count, so one standard error of it is the value over √samples. A change within two of them is
    // noise.
    auto se = [](double us, double samples_per_step, double steps) {
      const double n = samples_per_step * steps;
      return n > 0 ? us / std::sqrt(n) : 0.0;
    };
    auto noisy = [&](std::vector<KernelDiff>& v, auto size) {
      for (auto& k : v) {
        const double b = se(k.base_us_per_step, k.base_count_per_step, sb),
                     n = se(k.new_us_per_step, k.new_count_per_step, sn);
        k.noise_us_per_step = 2 * std::sqrt(b * b + n * n);
      }
      const auto cut = std::remove_if(v.begin(), v.end(),
                                      [&](const KernelDiff& k) { return size(k) <= k.noise_us_per_step; });
      out.within_noise += std::distance(cut, v.end());
      v.erase(cut, v.end());
    };
    noisy(both, [](const KernelDiff& k) { return std::fabs(k.delta_us_per_step()); });
    noisy(out.added, [](const KernelDiff& k) { return k.new_us_per_step; });
    noisy(out.removed, [](const KernelDiff& k) { return k.base_us_per_step; });
  }
  for (auto* v : {&both, &out.added})
    for (auto& k : *v) {
      k.fails = fails(k);
      out.regressions += k.fails;
    }
  // Failing ones first (so the cut never hides them), then by size of the change.
  std::sort(both.begin(), both.end(), [](const KernelDiff& x, const KernelDiff& y) {
    double ax = std::fabs(x.delta_us_per_step()), ay = std::fabs(y.delta_us_per_step());
    return x.fails != y.fails ? x.fails : ax != ay ? ax > ay : x.name < y.name;
  });
  std::sort(out.added.begin(), out.added.end(), [](const KernelDiff& x, const KernelDiff& y) {
    return x.fails != y.fails ? x.fails : x.new_us_per_step != y.new_us_per_step ? x.new_us_per_step > y.new_us_per_step : x.name < y.name;
  });
  std::sort(out.removed.begin(), out.removed.end(), [](const KernelDiff& x, const KernelDiff& y) {
    return x.base_us_per_step != y.base_us_per_step ? x.base_us_per_step > y.base_us_per_step : x.name < y.name;
  });
  out.added_total = static_cast<int64_t>(out.added.size());
  out.removed_total = static_cast<int64_t>(out.removed.size());
  const size_t top = static_cast<size_t>(std::max(0, cfg.top_kernels));
  for (auto* v : {&both, &out.added, &out.removed})
    if (v->size() > top) v->resize(std::max<size_t>(top, size_t(std::count_if(v->begin(), v->end(), [](const KernelDiff& k) { return k.fails; }))));
  return out;
}

}  // namespace

DiffResult diff_runs(const std::vector<DiffRun>& base, const std::vector<DiffRun>& now, const DiffConfig& cfg) {
  DiffResult d;
  d.config = cfg;
  StepSamples b = pool_steps(base, cfg, d.base, d.notes, "base");
  StepSamples n = pool_steps(now, cfg, d.now, d.notes, "new");

  // Warn when the sides found their steps differently: their per-step figures may not mean the same thing.
  {
    auto sources = [](const DiffSide& s) {
      std::vector<std::string> v = s.step_sources;
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      return v;
    };
    auto sb = sources(d.base), sn = sources(d.now);
    if (sb != sn && !sb.empty() && !sn.empty()) {
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : "+") + x;
        return s;
      };
      d.notes.push_back(fmt::format("steps were found differently (base: {}, new: {}); per-step figures may not compare",
                                    join(sb), join(sn)));
    }
    if (d.base.steps_dropped + d.now.steps_dropped > 0)
      d.notes.push_back(fmt::format("dropped the first {} step(s) of each run as warm-up ({} base, {} new); "
                                    "set skip_first_steps = 0 to keep them",
                                    cfg.skip_first_steps, d.base.steps_dropped, d.now.steps_dropped));
  }

  // The metrics: step time (median, p90), then one per share. Holm corrects over these six.
  // The GPU shares over the steps whose GPU was traced (dur paired with them), the data wait over every step.
  struct ShareDef {
    const char* id;
    const char* title;
    const std::vector<double>* bpart;
    const std::vector<double>* npart;
    const std::vector<double>* bdur;
    const std::vector<double>* ndur;
    double threshold;
    bool higher_is_worse;
  };
  const ShareDef shares[] = {
      {"gpu_busy_share", "GPU busy share", &b.busy, &n.busy, &b.gpu_dur_us, &n.gpu_dur_us, cfg.gpu_busy_share,
       false},
      {"data_wait_share", "Data-wait share", &b.data, &n.data, &b.dur_us, &n.dur_us, cfg.data_wait_share,
       true},
      {"launch_idle_share", "Launch-idle share", &b.launch, &n.launch, &b.gpu_dur_us, &n.gpu_dur_us,
       cfg.launch_idle_share, true},
      {"sync_idle_share", "Sync-idle share", &b.sync, &n.sync, &b.gpu_dur_us, &n.gpu_dur_us,
       cfg.sync_idle_share, true},
  };
  // The least steps that can show anything: as long as the exact Mann–Whitney test over five metrics could
  // reach alpha (5 per side); fewer, and a bootstrap of 3 or 4 steps is too coarse to trust.
  constexpr size_t kFamily = 5;
  auto testable_with = [&cfg](size_t x, size_t y) {
    return x >= 2 && y >= 2 && stats::min_attainable_p(x, y) * double(kFamily) <= cfg.alpha;
  };
  const size_t nb = b.size(), nn = n.size();
  const bool testable = testable_with(nb, nn);
  std::string too_few_note =
      fmt::format("too few steps for a significance test ({} base vs {} new); the threshold alone decides", nb, nn);

  if (!testable && nb > 0 && nn > 0) d.notes.insert(d.notes.begin(), too_few_note);
  const size_t gb = b.gpu_dur_us.size(), gn = n.gpu_dur_us.size();
  if ((gb < nb || gn < nn) && (d.base.has_gpu || d.now.has_gpu)) {
    d.notes.push_back(
        fmt::format("GPU windows: the GPU shares (busy, launch idle, sync idle) are over the steps whose "
                    "CUDA activity was "
                    "traced, {} of {} base and {} of {} new; the step time and data wait over every step",
                    gb, nb, gn, nn));
    if (testable && !testable_with(gb, gn))
      d.notes.push_back(
          fmt::format("too few traced steps for a significance test of the GPU shares ({} base vs {} "
                      "new); the threshold alone decides them",
                      gb, gn));
  }

  // Each metric's p-value and 95% interval come from one seeded bootstrap of its own change (the interval
  // inverted: p < 0.05 exactly when the interval excludes 0), so the two never disagree. Holm corrects the
  // p-values over the metrics for the verdict.
  auto test_of = [&](const stats::BootstrapStatistic& statistic, uint64_t salt, size_t x, size_t y) {
    if (!x || !y) return stats::BootstrapTest{};
    return stats::bootstrap_test(x, y, statistic, cfg.seed + salt, cfg.test_resamples());
  };
  auto mean_of = [](const std::vector<double>& v, const std::vector<size_t>* ix, size_t count) {
    double sum = 0;
    if (ix) {
      for (size_t i : *ix) sum += v[i];
    } else {
      for (size_t i = 0; i < count; ++i) sum += v[i];
    }
    const size_t k = ix ? ix->size() : count;
    return k ? sum / double(k) : std::nan("");
  };
  auto set_test = [&](MetricDiff& m, const stats::BootstrapTest& t) {
    m.p_value = t.p;
    // The interval is shown only with bootstrap_resamples > 0 (0 turns it off, as documented); the test
    // stays.
    if (cfg.bootstrap_resamples > 0) m.ci_valid = t.ci.valid, m.ci_lo = t.ci.lo, m.ci_hi = t.ci.hi;
  };

  // x, y: the steps the metric is over on each side (the traced ones for a GPU share).
  auto finish = [&](MetricDiff& m, size_t x, size_t y) {
    const bool testable = testable_with(x, y);
    m.tested = testable;
    bool moved = std::isfinite(m.change) && std::fabs(m.change) >= m.threshold && m.change != 0;
    if (moved && !m.relative) {
      // The share and the time per step must move past the threshold in the same direction, and the time per
      // step must have moved for certain: a share also moves when only the step's length changed.
      // time_change follows the share's direction (for GPU busy it is the idle time with its sign flipped).
      bool same_way = std::isfinite(m.time_change) && (m.change > 0) == (m.time_change > 0);
      bool time_moved =
          same_way && std::fabs(m.time_change) >= m.threshold && (!testable || m.time_p_value < cfg.alpha);
      if (!time_moved) {
        moved = false;
        const char* what = m.higher_is_worse ? "time" : "GPU idle time";
        m.note = fmt::format(
            "the share moved {:+.1f} pp but the {} per step went {} → {} ({}{}) while the step "
            "went {} → {}: the step length changed, not this component",
            m.change * 100, what, units::format_us(m.base_time_us), units::format_us(m.new_time_us),
            m.new_time_us >= m.base_time_us ? "+" : "-",
            units::format_us(std::fabs(m.new_time_us - m.base_time_us)), units::format_us(m.base_step_us),
            units::format_us(m.new_step_us));
      }
    }
    m.exceeds_threshold = moved;
    if (x == 0 || y == 0)
      m.note = nb == 0 || nn == 0 ? "no steps on one side; nothing to compare"
                                  : "no step with its GPU traced on one side; nothing to compare";
  };
  auto decide = [&](MetricDiff& m) {
    m.significant = m.tested && m.p_adjusted <= cfg.alpha;
    bool decided = m.exceeds_threshold && (m.significant || (!m.tested && std::isfinite(m.change)));
    if (decided) {
      bool worse = m.higher_is_worse ? m.change > 0 : m.change < 0;
      m.verdict = worse ? Verdict::Regression : Verdict::Improvement;
    }
  };

  // Step time: median and p90, relative.
  for (int which = 0; which < 2; ++which) {
    double q = which == 0 ? 0.5 : 0.9;
    MetricDiff m;
    m.id = which == 0 ? "step_time_median" : "step_time_p90";
    m.title = which == 0 ? "Step time (median)" : "Step time (p90)";
    m.relative = true;
    m.higher_is_worse = true;
    m.threshold = which == 0 ? cfg.step_time_median : cfg.step_time_p90;
    m.base = nb ? stats::quantile(b.dur_us, q) : std::nan("");
    m.now = nn ? stats::quantile(n.dur_us, q) : std::nan("");
    m.change = (nb && nn && m.base > 0) ? m.now / m.base - 1.0 : std::nan("");
    set_test(m, test_of(
                    [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
                      double qb = stats::quantile(pick(b.dur_us, ix), q);
                      return qb > 0 ? stats::quantile(pick(n.dur_us, iy), q) / qb - 1.0 : std::nan("");
                    },
                    uint64_t(which), nb, nn));
    finish(m, nb, nn);
    d.metrics.push_back(m);
  }
  for (size_t i = 0; i < 4; ++i) {
    const auto& s = shares[i];
    MetricDiff m;
    m.id = s.id;
    m.title = s.title;
    m.relative = false;
    m.higher_is_worse = s.higher_is_worse;
    m.threshold = s.threshold;
    const std::vector<double>&bdur = *s.bdur, &ndur = *s.ndur;
    const size_t x = bdur.size(), y = ndur.size();
    m.base = pooled_share(*s.bpart, bdur, nullptr);
    m.now = pooled_share(*s.npart, ndur, nullptr);
    m.change = m.now - m.base;
    // The component's time per step (for GPU busy: the idle time), absolute, and its change as a fraction of
    // the base mean step time, sign following the share (more idle = lower busy share).
    const double sign = s.higher_is_worse ? 1.0 : -1.0;
    auto component = [&](const std::vector<double>& part, const std::vector<double>& dur,
                         const std::vector<size_t>* ix, size_t count) {
      const double step = mean_of(dur, ix, count), v = mean_of(part, ix, count);
      return s.higher_is_worse ? v : step - v;
    };
    m.base_step_us = mean_of(bdur, nullptr, x), m.new_step_us = mean_of(ndur, nullptr, y);
    m.base_time_us = x ? component(*s.bpart, bdur, nullptr, x) : std::nan("");
    m.new_time_us = y ? component(*s.npart, ndur, nullptr, y) : std::nan("");
    m.time_change = x && y && m.base_step_us > 0 ? sign * (m.new_time_us - m.base_time_us) / m.base_step_us
                                                 : std::nan("");
    {
      auto t = test_of(
          [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
            const double bstep = mean_of(bdur, &ix, 0);
            return bstep > 0
                       ? sign * (component(*s.npart, ndur, &iy, 0) - component(*s.bpart, bdur, &ix, 0)) /
                             bstep
                       : std::nan("");
          },
          10 + i, x, y);
      m.time_p_value = t.p;
      if (t.ci.valid && cfg.bootstrap_resamples > 0)
        m.time_ci_valid = true, m.time_ci_lo = t.ci.lo, m.time_ci_hi = t.ci.hi;
    }
    set_test(m, test_of(
                    [&](const std::vector<size_t>& ix, const std::vector<size_t>& iy) {
                      return pooled_share(*s.npart, ndur, &iy) - pooled_share(*s.bpart, bdur, &ix);
                    },
                    2 + i, x, y));
    finish(m, x, y);
    d.metrics.push_back(m);
  }
  {
    std::vector<double> raw_p;
    for (const auto& m : d.metrics) raw_p.push_back(m.p_value);
    std::vector<double> adj = stats::holm_adjust(raw_p);
    for (size_t i = 0; i < d.metrics.size(); ++i) {
      d.metrics[i].p_adjusted = adj[i];
      decide(d.metrics[i]);
    }
  }

  // Kernel and op time by name, per step of each side (every step of every run, as they were counted).
  NameLevelDiff kernels = name_level_diff(base, now, &DiffRun::kernels, cfg, true);
  d.kernel_changes = std::move(kernels.changed);
  d.kernels_added = std::move(kernels.added);
  d.kernels_removed = std::move(kernels.removed);
  d.kernels_added_total = kernels.added_total;
  d.kernels_removed_total = kernels.removed_total;
  d.kernel_regressions = kernels.regressions;
  // Ops where both sides record them: a stepscope recording has no framework-op ranges, a Kineto trace does,
  // and every op of the trace read as added (77 "added" for the same program recorded both ways).
  auto has_ops = [](const std::vector<DiffRun>& runs) {
    return std::any_of(runs.begin(), runs.end(), [](const DiffRun& r) { return !r.ops.empty(); });
  };
  if (has_ops(base) == has_ops(now))
    d.ops = name_level_diff(base, now, &DiffRun::ops, cfg);
  else
    d.notes.push_back(
        fmt::format("framework ops are not compared: only the {} side records them (Kineto's cpu_op "
                    "events, op ranges); a stepscope recording has none",
                    has_ops(base) ? "base" : "new"));
  {
    // Sampled self time is not a gate: sampling noise of a few periods would fail builds.
    DiffConfig listed = cfg;
    listed.kernel_regression_us = 0;
    d.host_functions = name_level_diff(base, now, &DiffRun::host_functions, listed);
  }

  // Findings by rule.
  {
    auto fb = aggregate_findings(base), fn = aggregate_findings(now);
    std::map<std::string, bool> rules;
    for (auto& [r, _] : fb) rules[r] = true;
    for (auto& [r, _] : fn) rules[r] = true;
    int fail_rank = severity_rank(cfg.fail_on_new_findings);
    std::vector<FindingDiff> appeared, disappeared, changed, persisting;
    for (auto& [rule, _] : rules) {
      FindingDiff f;
      f.rule = rule;
      auto ib = fb.find(rule), in = fn.find(rule);
      f.has_base = ib != fb.end();
      f.has_new = in != fn.end();
      if (f.has_base) f.base_severity = ib->second.severity, f.base_share = ib->second.share;
      if (f.has_new) f.new_severity = in->second.severity, f.new_share = in->second.share;
      f.summary = f.has_new ? in->second.summary : ib->second.summary;
      if (f.has_new && !f.has_base) {
        f.status = FindingDiff::Status::Appeared;
        f.fails = int(f.new_severity) >= fail_rank;
        appeared.push_back(f);
      } else if (f.has_base && !f.has_new) {
        f.status = FindingDiff::Status::Disappeared;
        disappeared.push_back(f);
      } else if (f.base_severity != f.new_severity) {
        f.status = FindingDiff::Status::Changed;
        f.fails = int(f.new_severity) > int(f.base_severity) && int(f.new_severity) >= fail_rank;
        changed.push_back(f);
      } else {
        persisting.push_back(f);
      }
    }
    for (auto* v : {&appeared, &disappeared, &changed, &persisting})
      for (auto& f : *v) d.findings.push_back(std::move(f));
  }

  for (const auto& m : d.metrics)
    if (m.verdict == Verdict::Regression) d.regression = true;
  for (const auto& f : d.findings)
    if (f.fails) d.regression = true;
  if (d.kernel_regressions > 0 || d.ops.regressions > 0) d.regression = true;
  add_graph_notes(base, now, d.notes);
  return d;
}

}  // namespace stepscope::analyzer
