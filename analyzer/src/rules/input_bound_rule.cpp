// input-bound: the training thread waits for the next batch for a large share of the step.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_map>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

// The machine's CPUs as the recording saw them (meta host.cpus, written by `stepscope record`); 0 when
// unknown (imported traces, older stores).
int64_t recorded_cpus(const store::Trace& t) {
  auto it = t.meta.find("host.cpus");
  const int64_t n = it == t.meta.end() ? 0 : std::atoll(it->second.c_str());
  return n > 0 ? n : 0;
}

// Loaders the suggestion names for `cpus` CPUs: without a GPU they share the CPUs with training (half each,
// the training thread keeping at least one); with one, all but the training process's core. At most 8, at
// least 1.
int64_t suggested_loaders(int64_t cpus, bool has_gpu) {
  return std::clamp<int64_t>(has_gpu ? cpus - 1 : cpus / 2, 1, 8);
}

// The DataLoader's worker processes alive at once in the recording (torch names their threads pt_data_worker;
// each pid's life from its first to its last sample): an epoch's iterator starts new workers unless
// persistent_workers, so 2 workers over 5 epochs are 10 pids, never 10 at once. 0 when none was recorded
// (num_workers=0, an attach without --children, an imported trace).
int64_t recorded_dataloader_workers(const store::Trace& t) {
  const std::set<int64_t> pids = detail::dataloader_worker_pids(t);
  if (pids.empty()) return 0;
  std::map<int64_t, std::pair<int64_t, int64_t>> life;  // pid → first, last sample
  for (const auto& s : t.samples)
    if (pids.count(s.pid)) {
      auto [it, fresh] = life.try_emplace(s.pid, s.time, s.time);
      if (!fresh)
        it->second.first = std::min(it->second.first, s.time),
        it->second.second = std::max(it->second.second, s.time);
    }
  if (life.empty()) return int64_t(pids.size());
  std::vector<std::pair<int64_t, int>> edges;  // +1 at a start, −1 after an end
  for (const auto& [pid, span] : life)
    edges.emplace_back(span.first, 1), edges.emplace_back(span.second + 1, -1);
  std::sort(edges.begin(), edges.end());
  int64_t alive = 0, most = 0;
  for (const auto& [time, d] : edges) most = std::max(most, alive += d);
  return most;
}

class InputBoundRule final : public Rule {
 public:
  // TensorFlow profiler: input time >= 20% of the step is "highly input-bound", >= 5% "moderately". The share is
  // of the step spent waiting (the wait the step could not hide), not of the saving.
  static constexpr double kHighShare = 0.20;
  static constexpr double kMediumShare = 0.05;
  // The saving assumes loading ahead of the loop in this many parallel loaders (the suggestion's num_workers=8):
  // a step becomes max(rest of the step, wait / loaders). Checked against measured cures: torch_dataloader on an
  // H100 (70.7 ms, 95% waiting → 7.1 ms with 4 workers: saved 63.6, estimated 63.1 ms) and python_torch_train on
  // this machine's 2 CPUs (docs/rules.md).
  static constexpr double kAssumedParallelLoaders = 8.0;

  const char* id() const override { return "input-bound"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    if (ctx.traced_step_ns <= 0) return;
    const bool has_gpu = !ctx.busy.empty();
    int64_t host_wait = 0, idle_wait = 0;
    int64_t traced_host_wait = 0;  // the host's wait inside the GPU-traced steps
    for (const auto& s : ctx.steps) {
      host_wait += s.host_data_wait_ns, idle_wait += s.data_wait_ns;
      if (s.gpu_traced) traced_host_wait += s.host_data_wait_ns;
    }

    // What counts is the wait the step could not hide: with a GPU, the time the GPU sat idle while the training
    // thread waited (a wait overlapped by queued GPU work costs nothing); without one, the host's own wait. The
    // severity is that wait's share of the steady steps; the saving is what loading ahead in parallel leaves of it.
    FindingResult f;
    f.rule = id();
    double saved = 0, steady_wait = 0;
    int64_t steady_n = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      const auto& s = ctx.steps[i];
      const int64_t wait = has_gpu ? s.data_wait_ns : s.host_data_wait_ns;
      if (ctx.steady[i]) steady_wait += double(wait), ++steady_n;
      if (!ctx.steady[i] || s.dur_ns <= 0 || double(wait) < kMediumShare * double(s.dur_ns)) continue;
      int64_t step_saved = claim_idle_in_step(ctx, ledger, i, detail::IdleKind::Data);
      if (!has_gpu) step_saved = std::max(step_saved, wait);
      // With loading overlapped the step takes max(rest, load / loaders); the loop's wait is the load it did inline.
      const double floor = double(s.host_data_wait_ns) / kAssumedParallelLoaders;
      step_saved = std::min<int64_t>(step_saved, std::max<int64_t>(0, s.dur_ns - int64_t(floor)));
      if (step_saved <= 0) continue;
      f.steps.push_back(s.index);
      saved += double(step_saved);
    }
    if (f.steps.empty()) return;
    auto decision = decide_severity(steady_share(ctx, steady_wait), kHighShare, kMediumShare);
    if (!decision) return;
    f.severity = decision->severity;
    f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
    f.share = saved / double(ctx.traced_step_ns);
    const store::Trace& t = ctx.t();

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
      // Named as every view names the source ("DataLoader waits", not the table's "data_waits:dataloader").
      auto& e = sources[data_wait_source_words(t.str(d.source)) + " waits"];
      e.first++, e.second += d.end - d.start;
      if (f.ranges.size() < kMaxRangesPerFinding) f.ranges.push_back({d.start, d.end});
    }
    bool single_process = false, multi_process = false, tf = false;
    for (auto& [n, e] : sources) {
      single_process |= n.find("_SingleProcessDataLoaderIter") != std::string::npos;
      multi_process |= n.find("_MultiProcessingDataLoaderIter") != std::string::npos;
      tf |= n.find("IteratorGetNext") != std::string::npos || n.find("tf.data") != std::string::npos;
    }

    // Our own recordings mark the wait by a hook on the iterator ("dataloader") without its class: the sampled
    // Python frames say which iterator ran (one kind only; a program with both stays unknown).
    if (!single_process && !multi_process && !tf) {
      bool single_frames = false, multi_frames = false;
      std::unordered_map<store::StringId, int> kind;  // 0 neither, 1 single, 2 multi
      for (const auto& fr : t.frames) {
        if (fr.kind != store::FrameKind::Python) continue;
        auto [it, fresh] = kind.emplace(fr.symbol, 0);
        if (fresh) {
          const auto& n = t.str(fr.symbol);
          it->second = n.find("_SingleProcessDataLoaderIter") != std::string::npos     ? 1
                       : n.find("_MultiProcessingDataLoaderIter") != std::string::npos ? 2
                                                                                       : 0;
        }
        single_frames |= it->second == 1, multi_frames |= it->second == 2;
      }
      single_process = single_frames && !multi_frames;
      multi_process = multi_frames && !single_frames;
    }

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("data_wait_share", double(host_wait) / double(ctx.total_step_ns));
    // The GPU's side of the wait only where there is a GPU: a CPU run's evidence read "GPU idle while the
    // host waits, per step 35.3 ms" (docs/report.md: without GPU activity every view speaks of the host
    // alone).
    if (has_gpu) {
      w.kv("input_idle_share", double(idle_wait) / double(ctx.traced_step_ns));
      w.kv("hidden_behind_gpu_work_share", double(traced_host_wait - idle_wait) / double(ctx.traced_step_ns));
    }
    write_severity_evidence(w, *decision);
    // In words: the estimate is of loading ahead in parallel, not of the suggestion's loader count (on a
    // 2-CPU run "assumed 8" beside "suggested 1" read as a contradiction).
    w.kv("saving_model",
         "step = max(rest of the step, wait / loaders in parallel): loading ahead hides the wait "
         "up to the rest of the step");
    w.kv("assumed_parallel_loaders", kAssumedParallelLoaders);
    const int64_t workers_now = recorded_dataloader_workers(t);
    if (const int64_t cpus = recorded_cpus(t))
      w.kv("cpus", cpus).kv("suggested_loaders", std::max(suggested_loaders(cpus, has_gpu), workers_now));
    if (workers_now > 0) w.kv("dataloader_workers", workers_now);
    w.kv("host_data_wait_us_per_step", double(host_wait) / double(ctx.steps.size()) / 1000.0);
    if (has_gpu)
      w.kv("gpu_idle_while_waiting_us_per_step",
           double(idle_wait) / double(std::max<int64_t>(1, ctx.traced_steps)) / 1000.0);
    // None of the three: no key ("data loader unknown" said nothing).
    if (single_process || multi_process || tf)
      w.kv("loader", single_process  ? "pytorch-dataloader-num_workers-0"
                     : multi_process ? "pytorch-dataloader-workers"
                                     : "tf.data");
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

    // The sentence speaks of the steady steps, as the severity does: a warm-up step of 0.5 s would make the
    // wait "per step" longer than the median step.
    const std::string warmup = steady_n < int64_t(ctx.steps.size()) ? ", warm-up step left out" : "";
    const double n = double(std::max<int64_t>(1, steady_n));
    const std::string how_much = format_pct(steady_share(ctx, double(steady_wait))) + " of the step time (" +
                                 format_us(double(steady_wait) / n) + " of the mean " +
                                 format_us(double(ctx.steady_step_ns) / n) + " step" + warmup + ")";
    if (has_gpu)
      f.summary = "The GPU waits for input " + how_much + " while the training loop loads the next batch" +
                  (single_process ? "; the DataLoader runs with num_workers=0" : "") + ".";
    else
      f.summary = "The training loop waits for input " + how_much +
                  (single_process ? "; the DataLoader runs with num_workers=0" : "") + ".";
    bool python = false;
    for (const auto& fr : t.frames) python |= fr.kind == store::FrameKind::Python;
    // Sized to the recorded machine: a fixed 8 workers and cores - 8 threads went negative on 2 CPUs.
    const int64_t cpus = recorded_cpus(t);
    const int64_t loaders = suggested_loaders(cpus, has_gpu);
    const std::string sized = cpus ? " (" + std::to_string(cpus) + " CPUs recorded)" : "";
    // A DataLoader that already runs as many workers as the CPUs allow is told so, never given fewer: a run
    // with num_workers=2 on 2 CPUs was shown num_workers=1.
    // Against what the CPUs allow, not the suggestion's cap of 8: 8 workers on 64 CPUs are not "as many as
    // allowed".
    const int64_t allowed = std::max<int64_t>(1, has_gpu ? cpus - 1 : cpus / 2);
    const bool workers_enough = workers_now > 0 && cpus > 0 && workers_now >= allowed;
    const std::string enough =
        workers_enough
            ? "The DataLoader already runs " + std::to_string(workers_now) + " worker" +
                  (workers_now == 1 ? "" : "s") + ", as many as the " + std::to_string(cpus) +
                  " CPUs recorded allow beside training: more would take CPUs from the step. Make each "
                  "batch cheaper to load instead — cache decoded samples when the dataset fits in "
                  "memory, decode once ahead of training rather than in __getitem__ — and prefetch "
                  "further ahead:\n"
            : std::string();
    if (workers_enough && !tf && (ctx.framework == "pytorch" || !has_gpu)) {
      f.suggestion = enough +
                     "  loader = torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True,\n"
                     "      num_workers=" +
                     std::to_string(workers_now) + ", prefetch_factor=4, persistent_workers=True" +
                     (has_gpu ? ", pin_memory=True" : "") + ")";
    } else if (!has_gpu && !tf && ctx.framework == "pytorch") {
      const std::string workers = cpus ? std::to_string(loaders) : "workers";
      f.suggestion =
          std::string(single_process
                          ? "Load batches in worker processes instead of the training loop's thread"
                          : "Give the DataLoader more workers and prefetch further ahead" +
                                (workers_now > 0 ? " (it runs " + std::to_string(workers_now) + " now)"
                                                 : std::string())) +
          ", so the next batches are ready when the step asks; without a GPU the workers share the CPUs "
          "with training, so leave training the rest" +
          sized + ":\n" +
          (cpus ? std::string() : "  import os\n  workers = max(1, min(8, (os.cpu_count() or 2) // 2))\n") +
          "  loader = torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True,\n"
          "      num_workers=" +
          workers + ", prefetch_factor=4, persistent_workers=True)\n" +
          (cpus ? "  torch.set_num_threads(" + std::to_string(std::max<int64_t>(1, cpus - loaders)) + ")\n"
                : std::string("  torch.set_num_threads(max(1, (os.cpu_count() or 2) - workers))\n")) +
          "Cache decoded samples when the dataset fits in memory.";
    } else if (!has_gpu && !tf && python) {
      const std::string n = cpus ? std::to_string(loaders) : "workers";
      f.suggestion =
          "Load the next batches ahead of the step, in parallel, instead of inline in the training loop" +
          sized +
          ":\n"
          "  import collections\n"
          "  from concurrent.futures import ThreadPoolExecutor  # ProcessPoolExecutor when decoding holds "
          "the GIL\n" +
          (cpus ? std::string() : "  import os\n  workers = max(1, min(8, (os.cpu_count() or 2) // 2))\n") +
          "  pool = ThreadPoolExecutor(max_workers=" + n +
          ")\n"
          "  pending = collections.deque(pool.submit(load_batch, i) for i in range(" +
          n +
          "))\n"
          "  for i in range(steps):\n"
          "      batch = pending.popleft().result()\n"
          "      pending.append(pool.submit(load_batch, i + " +
          n +
          "))\n"
          "      train_step(batch)\n"
          "Cache decoded batches when the dataset fits in memory.";
    } else if (!has_gpu && !tf) {
      f.suggestion =
          "Load the next batches on loader threads ahead of the training loop: a bounded queue of ready "
          "batches\n"
          "(std::thread workers + a condition variable), the loop popping one per step, so a batch decodes "
          "while\n"
          "the previous step computes. Size the workers so one batch loads in less time than a step "
          "computes" +
          (cpus ? "; with " + std::to_string(cpus) + " CPUs recorded, " + std::to_string(loaders) +
                      " loader thread(s) leave training the other " +
                      std::to_string(std::max<int64_t>(1, cpus - loaders))
                : std::string()) +
          ".";
    } else if (!tf && ctx.framework == "cuda") {
      f.suggestion =
          "Load and decode the next batches on worker threads ahead of the training loop and copy them from pinned\n"
          "buffers on a copy stream, so the GPU never waits for the host:\n"
          "  cudaMallocHost(&staging[i], bytes);               // a ring of pinned buffers filled by worker threads\n"
          "  cudaMemcpyAsync(dev[i], staging[i], bytes, cudaMemcpyHostToDevice, copy_stream);\n"
          "  cudaEventRecord(ready[i], copy_stream); cudaStreamWaitEvent(compute_stream, ready[i], 0);\n"
          "Size the workers so one batch decodes in less time than the GPU computes a step.";
    } else if (tf) {
      f.suggestion =
          "Overlap the input pipeline with training in tf.data: parallel map, prefetch, cache, interleave reads:\n"
          "  ds = (tf.data.Dataset.list_files(pattern)\n"
          "        .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)\n"
          "        .map(parse_and_augment, num_parallel_calls=tf.data.AUTOTUNE)\n"
          "        .cache()  # if the decoded dataset fits in memory\n"
          "        .batch(batch_size).prefetch(tf.data.AUTOTUNE))\n"
          "For JPEG-heavy pipelines decode on the GPU (NVIDIA DALI).";
    } else {
      f.suggestion =
          std::string(single_process
                          ? "Load batches in worker processes instead of the training loop's thread"
                          : "Give the DataLoader more parallelism and prefetch further ahead" +
                                (workers_now > 0
                                     ? " (it runs " + std::to_string(workers_now) + " workers now)"
                                     : std::string())) +
          ", with pinned memory so the host-to-device copy can be asynchronous:\n"
          "  loader = torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True,\n"
          "      num_workers=" +
          std::to_string(cpus ? std::max(loaders, workers_now + 1) : std::max<int64_t>(8, workers_now + 1)) +
          (cpus ? ",  # " + std::to_string(cpus) + " CPUs recorded, one left for training\n"
                : std::string(",            # ~ CPU cores per GPU\n")) +
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
