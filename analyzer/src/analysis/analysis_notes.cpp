// The sentences every view of an analysis says about the run as a whole: GPU windows, flight saves, missing step
// markers, no GPU, host running ahead (declared in analysis.h).
#include <fmt/format.h>

#include "format/units.h"
#include "import/event_counts.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer {

std::string gpu_window_note(const AnalysisSummary& s) {
  if (s.gpu_traced_steps >= s.steps) return {};
  std::string out = "GPU traced in " + std::to_string(s.gpu_traced_steps) + " of " + std::to_string(s.steps) +
                    " steps (gpu window " + s.gpu_window +
                    "): GPU shares, step breakdowns and findings come from those steps; step times and the "
                    "training loop's data wait from all of them.";
  if (!s.cuda_lent.empty())
    out +=
        " CUDA tracing was lent to " + s.cuda_lent +
        ": the steps under that profiler have no GPU activity here (docs/collector.md, \"A good neighbour to "
        "torch.profiler\").";
  if (s.gpu_traced_start_only && s.flight_trigger.empty())  // a flight save is a slice, not a run's start
    out +=
        " Only the run's first " + std::to_string(s.gpu_traced_steps) +
        " steps were traced: they show its start-up, not its steady pace (the off phase after a window lasts "
        "at least a second); record a run this short with `--gpu-window all`.";
  return out;
}

std::string flight_note(const AnalysisSummary& s) {
  if (s.flight_trigger.empty()) return "";
  std::string out = "Saved by the flight recorder (" + s.flight_trigger + "): " + s.flight_detail + ".";
  if (!s.flight_gpu_steps.empty())
    out += s.flight_gpu_steps == "none" ? " No step of this window has GPU activity."
                                        : " Steps with GPU activity: " + s.flight_gpu_steps + ".";
  return out;
}

namespace {

std::string no_markers_advice(const AnalysisSummary& s) {
  if (s.step_source != "none" && s.step_source != "periodic") return {};
  const std::string what =
      "mark them: `stepscope record --step-func REGEX` (and `--data-wait-func REGEX`) with the Python function "
      "that runs one step (and the one that fetches a batch), `stepscope.step()` / `with stepscope.data_wait():` "
      "in the code, NVTX ranges with `--step-regex`, or stepscope_step() from C/C++ (docs/python.md).";
  const std::string& h = s.python_hooks;
  if (h.rfind("installed in 0 of", 0) == 0)
    return "No step markers: the Python hooks could not be installed (" + h + "); " + what;
  if (h.rfind("installed in ", 0) == 0)
    return "No step markers: the Python hooks were in place (" + h +
           ") but saw no DataLoader, tf.data or optimizer step call; " + what;
  // A C/C++ program: the header is its way; the Python ways do not apply.
  if (h.rfind("none", 0) == 0)
    return "No step markers (no Python in the recorded processes): mark them with stepscope.h, installed as "
           "<prefix>/include/stepscope.h (collector/include/stepscope.h in the source tree): call "
           "stepscope_step() once per step and wrap the wait for the next batch in "
           "stepscope_data_wait_begin() and stepscope_data_wait_end(); it needs no library at link time "
           "(-ldl on glibc < 2.34). Or NVTX ranges with `--step-regex` (docs/python.md).";
  return "No step markers in this trace; " + what;
}

}  // namespace

std::string steps_advice(const AnalysisSummary& s) {
  std::string out = no_markers_advice(s);
  // A --step-regex that matched no range's name: said, where a typo fell back to other steps without a word.
  if (!s.step_regex.empty() && s.step_source != "regex")
    out = "--step-regex '" + s.step_regex + "' matched no range's name" +
          (s.step_source == "none" ? std::string(", and nothing else marked steps.")
                                   : ": the steps come from " + s.step_source + " instead.") +
          (out.empty() ? "" : " " + out);
  if (s.other_thread_data_waits > 0)
    out +=
        std::string(out.empty() ? "" : " ") + std::to_string(s.other_thread_data_waits) + " data wait(s) (" +
        units::format_ns_fixed(s.other_thread_data_wait_us * 1000.0) +
        ") were on other threads than the training loop's and are not counted as its wait (a prefetch thread "
        "waits so that the loop does not); if the loop blocks on that thread (a queue.get), mark that call "
        "as "
        "its wait: `with stepscope.data_wait():`, or stepscope_data_wait_begin()/end() in C/C++ "
        "(docs/python.md).";
  return out;
}

std::string no_gpu_note(const AnalysisSummary& s) {
  if (s.has_gpu) return {};
  if (s.unread_device_events.empty())
    return "No GPU activity in this trace: the breakdown covers host time only (the training loop's wait for input "
           "and its own work).";
  std::string events;  // "mtia_ccp_events:25814,mtia_runtime:3453" -> "25814 mtia_ccp_events, 3453 mtia_runtime"
  for (const auto& [name, n] : import::parse_event_counts(s.unread_device_events))
    events += (events.empty() ? "" : ", ") + (n < 0 ? name : std::to_string(n) + " " + name);
  std::string why = "The trace holds device activity stepscope cannot read (" + events + ")";
  if (s.unread_device_events.find("cuda_profiler_range") != std::string::npos)
    why += "; cuda_profiler_range events are CUPTI range-profiler metrics whose times Kineto makes up (the profiled "
           "span split evenly), not a GPU timeline: trace the run with CUDA activity instead";
  return why + ": no GPU breakdown or GPU finding is possible; what follows covers host time only.";
}

std::string malformed_events_note(const AnalysisSummary& s) {
  if (s.malformed_events.empty()) return {};
  int64_t total = 0;
  std::string why;  // "(ts not a time):3,(no ph):984" -> "3 ts not a time, 984 no ph"
  for (auto [what, n] : import::parse_event_counts(s.malformed_events)) {
    n = std::max<int64_t>(n, 0);
    total += n;
    why += fmt::format("{}{} {}", why.empty() ? "" : ", ", n,
                       what.size() > 2 && what.front() == '(' ? what.substr(1, what.size() - 2) : what);
  }
  return fmt::format("The file held {} event{} that could not be read and {} left out ({}): every figure here is "
                     "over the rest.",
                     total, total == 1 ? "" : "s", total == 1 ? "was" : "were", why);
}

const std::vector<StepBreakdown>& step_rows(const Analysis& a) { return a.gpu_steps.empty() ? a.steps : a.gpu_steps; }

std::string step_rows_note(const Analysis& a) {
  if (a.gpu_steps.empty()) return {};
  return "Rows in the GPU's time (the host runs ahead): each step from the first GPU work it launched to the next "
         "step's.";
}

std::string step_source_note(const AnalysisSummary& s) {
  if (s.step_source == "periodic")
    return fmt::format("Steps found from the repeating unit of the trace (confidence {:.0f}%).", 100.0 * s.step_confidence);
  if (s.step_source == "none" && s.step_confidence == 0.0)
    return "No step markers and no repeating unit found: the run is analyzed as one window.";
  return {};
}

std::string profiler_cost_note(const AnalysisSummary& s) {
  const ProfilerCorrection& p = s.profiler;
  if (p.removed_us <= 0) return {};
  // What tracing launches and the Python hooks cost the host, and the part removed from the steps: capped by each
  // step's launch and host idle, so a figure printed as "x launches = y" must be the product and the removed part
  // said apart.
  const double launch_us = p.applied ? p.cost_ns_per_launch / 1e3 * double(p.launches) : 0;
  const int64_t hook_calls = p.hook_step_calls + p.hook_wait_calls;
  const double hook_us = (p.hook_ns_per_step_call * double(p.hook_step_calls) +
                          p.hook_ns_per_wait_call * double(p.hook_wait_calls)) / 1e3;
  std::string what;
  if (launch_us > 0)
    what = fmt::format("{} per launch x {} launches", units::format_us(p.cost_ns_per_launch / 1e3), p.launches);
  if (hook_us > 0) what += fmt::format("{}{} hooked Python calls", what.empty() ? "" : " + ", hook_calls);
  const double cost_us = launch_us + hook_us;
  const bool all = p.removed_us >= 0.995 * cost_us;
  std::string o = fmt::format("Profiler cost: {} = {} of host time; {} removed from the steps{}", what,
                              units::format_us(cost_us), all ? "all of it" : units::format_us(p.removed_us),
                              all ? "" : " (where the GPU waited for it; the rest overlapped GPU work)");
  if (p.applied)
    o += fmt::format("; median step {} recorded, ~{} without the profiler", units::format_us(p.step_median_us),
                     units::format_us(p.corrected_step_median_us));
  return o;
}

std::string compact_step_list(const std::vector<int64_t>& steps, size_t max_runs) {
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (runs++ == max_runs) return out + ", …";
    out += (out.empty() ? "" : ", ") + std::to_string(steps[i]) +
           (j > i ? (j == i + 1 ? ", " : "–") + std::to_string(steps[j]) : std::string());
    i = j + 1;
  }
  return out;
}

std::string warmup_share_note(const Analysis& a) {
  if (a.findings.empty()) return {};
  int64_t total = 0;
  std::string which;
  int64_t warm = 0;
  for (const auto& s : a.steps) {
    total += s.dur_ns;
    if (s.warmup) which += (which.empty() ? "" : ", ") + std::to_string(s.index), warm += s.dur_ns;
  }
  if (which.empty() || total <= 0) return {};
  return fmt::format("Shares of step time count the warm-up step {} ({}, {:.1f}% of all step time); severities and "
                     "the findings' summaries are judged on the steady steps without it.",
                     which, units::format_us(double(warm) / 1e3), 100.0 * double(warm) / double(total));
}

double traced_mean_step_us(const Analysis& a) {
  int64_t traced = 0, n = 0;
  for (const auto& s : a.steps)
    if (s.gpu_traced) traced += s.dur_ns, ++n;
  return n ? double(traced) / double(n) / 1e3 : 0.0;
}

std::string estimate_replay_sentence(const FindingResult& f, double mean_step_us) {
  if (f.replayed_cure.empty() || mean_step_us <= 0) return {};
  const double estimate = f.share * mean_step_us, replay = std::max(0.0, f.replayed_saving_us);
  const double hi = std::max(estimate, replay), lo = std::min(estimate, replay);
  // Below 1% of the step both are noise; within the ratio they agree as well as a model can.
  if (hi < 0.01 * mean_step_us || hi <= kEstimateReplayRatio * lo) return {};
  return fmt::format(
      "{}: its estimate, {} a step (the idle its cause explains), and the replay of the cure, {} a "
      "step, differ {}: {}.",
      f.rule, units::format_us(estimate), units::format_us(replay),
      lo > 0 ? fmt::format("{:.0f}x", hi / lo) : std::string("entirely"),
      estimate > replay ? "with the cause gone the GPU work it waited for, or another wait, still bounds "
                          "the step; the replay is the nearer figure for the step time gained"
                        : "the replay also counts what the cure changes beyond that idle (the host "
                          "running ahead, other waits overlapped); the estimate is the lower bound");
}

std::string estimate_replay_note(const Analysis& a) {
  const double mean_step_us = traced_mean_step_us(a);
  std::string o;
  for (const auto& f : a.findings)
    if (std::string one = estimate_replay_sentence(f, mean_step_us); !one.empty())
      o += (o.empty() ? "" : " ") + one;
  return o;
}

std::string cure_phrase(const std::string& c) {
  return c == "cuda-graph" ? "with CUDA graphs"
         : c == "fused"    ? "with the short kernels fused"
         : c == "prefetch" ? "with the input prefetched"
         : c == "async"    ? "without the blocking syncs"
         : c == "batched"  ? "with the GEMM loop batched"
         : c == "pinned"   ? "with pinned copies"
                           : "with the cure";
}

std::string host_ahead_note(const AnalysisSummary& s) {
  if (!s.host_runs_ahead) return {};
  return fmt::format(
      "The host runs ahead of the GPU: a step takes {} on the GPU (start of its GPU work to the next step's) "
      "against {} on the host; the GPU's is the program's pace, and the per-step rows are in the GPU's time (findings "
      "and totals use the host's steps).",
      units::format_ns_fixed(s.gpu_step_median_us * 1000.0), units::format_ns_fixed(s.host_step_median_us * 1000.0));
}

}  // namespace stepscope::analyzer
