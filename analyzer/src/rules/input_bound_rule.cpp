// input-bound: the training thread waits for the next batch for a large share of the step.
#include <algorithm>
#include <map>
#include <set>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class InputBoundRule final : public Rule {
 public:
  // TensorFlow profiler: input time >= 20% of the step is "highly input-bound", >= 5% "moderately".
  static constexpr double kHighShare = 0.20;
  static constexpr double kMediumShare = 0.05;

  const char* id() const override { return "input-bound"; }

  void run(const detail::Context& ctx, std::vector<FindingResult>& out) const override {
    if (ctx.total_step_ns <= 0) return;
    int64_t host_wait = 0, idle_wait = 0;
    for (const auto& s : ctx.steps) host_wait += s.host_data_wait_ns, idle_wait += s.data_wait_ns;
    double share = double(host_wait) / double(ctx.total_step_ns);
    if (share < kMediumShare) return;
    const store::Trace& t = ctx.t();
    bool has_gpu = !ctx.busy.empty();

    FindingResult f;
    f.rule = id();
    f.severity = share >= kHighShare ? store::Severity::High : store::Severity::Medium;
    double saved = 0;
    for (const auto& s : ctx.steps) {
      if (s.dur_ns <= 0 || double(s.host_data_wait_ns) < kMediumShare * double(s.dur_ns)) continue;
      f.steps.push_back(s.index);
      // Prefetching overlaps loading with the step's GPU work (host compute when there is no GPU).
      int64_t hide_behind = has_gpu ? s.gpu_busy_ns : s.dur_ns - s.host_data_wait_ns;
      saved += double(std::min(s.host_data_wait_ns, hide_behind));
    }
    if (f.steps.empty()) return;
    f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
    f.share = saved / double(ctx.total_step_ns);

    // What waited: range names and data_waits sources inside steps.
    std::map<std::string, std::pair<int64_t, int64_t>> sources;  // name -> (count, ns)
    for (const auto& r : t.ranges) {
      if (r.source == store::RangeSource::GpuAnnotation) continue;
      const auto& n = t.str(r.name);
      if (!detail::is_data_wait_range(n) || ctx.step_at(r.start) < 0) continue;
      auto& e = sources[n];
      e.first++, e.second += r.end - r.start;
      if (f.ranges.size() < kMaxRangesPerFinding) f.ranges.push_back({r.start, r.end});
    }
    std::set<std::pair<int64_t, int64_t>> seen;  // importers may record a loader range in both places
    for (const auto& r : t.ranges)
      if (r.source != store::RangeSource::GpuAnnotation && detail::is_data_wait_range(t.str(r.name))) seen.insert({r.start, r.end});
    for (const auto& d : t.data_waits) {
      if (ctx.step_at(d.start) < 0 || seen.count({d.start, d.end})) continue;
      auto& e = sources["data_waits:" + t.str(d.source)];
      e.first++, e.second += d.end - d.start;
      if (f.ranges.size() < kMaxRangesPerFinding) f.ranges.push_back({d.start, d.end});
    }
    bool single_process = false, multi_process = false, tf = false;
    for (auto& [n, e] : sources) {
      single_process |= n.find("_SingleProcessDataLoaderIter") != std::string::npos;
      multi_process |= n.find("_MultiProcessingDataLoaderIter") != std::string::npos;
      tf |= n.find("IteratorGetNext") != std::string::npos || n.find("tf.data") != std::string::npos;
    }

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("data_wait_share", share);
    w.kv("host_data_wait_us_per_step", double(host_wait) / double(ctx.steps.size()) / 1000.0);
    w.kv("gpu_idle_while_waiting_us_per_step", double(idle_wait) / double(ctx.steps.size()) / 1000.0);
    w.kv("loader", single_process ? "pytorch-dataloader-num_workers-0"
                   : multi_process ? "pytorch-dataloader-workers"
                   : tf           ? "tf.data"
                                  : "unknown");
    w.key("sources").begin_array();
    for (auto& [n, e] : sources)
      w.begin_object().kv("name", n).kv("count", e.first).kv("total_us", double(e.second) / 1000.0).end_object();
    w.end_array();
    w.key("per_step").begin_array();
    for (const auto& s : ctx.steps)
      w.begin_object()
          .kv("step", s.index)
          .kv("host_data_wait_us", double(s.host_data_wait_ns) / 1000.0)
          .kv("share", s.dur_ns ? double(s.host_data_wait_ns) / double(s.dur_ns) : 0.0)
          .end_object();
    w.end_array();
    w.end_object();
    f.evidence_json = std::move(ev);

    f.summary = "The training loop waits for input " + format_pct(share) + " of the step time (" +
                format_us(double(host_wait) / double(ctx.steps.size())) + " per step)" +
                (single_process ? "; the DataLoader runs with num_workers=0" : "") + ".";
    if (tf) {
      f.suggestion =
          "Overlap the input pipeline with training in tf.data: parallel map, prefetch, cache, interleave reads:\n"
          "  ds = (tf.data.Dataset.list_files(pattern)\n"
          "        .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)\n"
          "        .map(parse_and_augment, num_parallel_calls=tf.data.AUTOTUNE)\n"
          "        .cache()  # if the decoded dataset fits in memory\n"
          "        .batch(batch_size).prefetch(tf.data.AUTOTUNE))\n"
          "For JPEG-heavy pipelines decode on the GPU (NVIDIA DALI).";
    } else {
      f.suggestion = std::string(single_process ? "Load batches in worker processes instead of the training loop's thread"
                                                : "Give the DataLoader more parallelism and prefetch further ahead") +
                     ", with pinned memory so the host-to-device copy can be asynchronous:\n"
                     "  loader = torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True,\n"
                     "      num_workers=8,            # ~ CPU cores per GPU\n"
                     "      pin_memory=True, prefetch_factor=4, persistent_workers=True)\n"
                     "  for x, y in loader:\n"
                     "      x = x.cuda(non_blocking=True); y = y.cuda(non_blocking=True)\n"
                     "For image pipelines bound by JPEG decode, decode on the GPU (NVIDIA DALI); cache preprocessed "
                     "samples when the dataset fits in memory.";
    }
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_input_bound_rule() { return std::make_unique<InputBoundRule>(); }

}  // namespace stepscope::analyzer::rules
