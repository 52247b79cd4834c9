// sync-stall: the host blocks on the device inside steps and the GPU runs dry meanwhile.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class SyncStallRule final : public Rule {
 public:
  // Severity by sync idle as a share of the steady steps' time.
  static constexpr double kHighShare = 0.20;
  static constexpr double kMediumShare = 0.05;
  // Blocking calls examined for their enclosing ops/annotations (largest idle first).
  static constexpr size_t kMaxExamined = 256;
  static constexpr size_t kMaxGroups = 10;

  const char* id() const override { return "sync-stall"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    const store::Trace& t = ctx.t();
    if (ctx.traced_step_ns <= 0 || ctx.busy.empty()) return;
    int64_t sync = 0, steady_sync = 0;
    FindingResult f;
    f.rule = id();
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      if (ctx.steps[i].sync_idle_ns <= 0) continue;
      // Without the sync the host would run ahead and keep the queue full: the idle it caused is the saving.
      int64_t saved = claim_idle_in_step(ctx, ledger, i, detail::IdleKind::Sync);
      if (saved <= 0) continue;
      f.steps.push_back(ctx.steps[i].index), sync += saved;
      if (ctx.steady[i]) steady_sync += saved;
    }
    if (f.steps.empty()) return;
    auto decision = decide_severity(steady_share(ctx, double(steady_sync)), kHighShare, kMediumShare);
    if (!decision) return;
    double share = double(sync) / double(ctx.traced_step_ns);
    double per_step = double(sync) / double(f.steps.size());
    f.severity = decision->severity;
    f.est_savings_us_per_step = per_step / 1000.0;
    f.share = share;

    // Name each blocking call by the op and annotation it ran under, then group.
    std::vector<int32_t> order;
    for (int32_t i = 0; i < int32_t(ctx.blocking.size()); ++i) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const auto &x = ctx.blocking[a], &y = ctx.blocking[b];
      if (x.idle_ns != y.idle_ns) return x.idle_ns > y.idle_ns;
      return (x.end - x.start) > (y.end - y.start);
    });
    if (order.size() > kMaxExamined) order.resize(kMaxExamined);
    struct Group {
      std::string api, what, op, annotation, stack;
      bool in_steps = false;
      int64_t count = 0, blocked_ns = 0, idle_ns = 0;
    };
    std::map<std::string, Group> groups;
    std::vector<detail::RangeQuery> queries;
    for (int32_t i : order) queries.push_back({ctx.blocking[i].pid, ctx.blocking[i].tid, ctx.blocking[i].start, ctx.blocking[i].end});
    auto enclosing = detail::enclosing_ranges_batch(t, queries);
    for (size_t qi = 0; qi < order.size(); ++qi) {
      const auto& b = ctx.blocking[order[qi]];
      std::string op, annotation, stack;
      for (int64_t ri : enclosing[qi]) {
        const auto& r = t.ranges[ri];
        std::string n = detail::strip_numeric_suffix(t.str(r.name));
        if (b.range == ri) continue;
        stack += (stack.empty() ? "" : " > ") + n;
        if (r.source == store::RangeSource::Op) op = n;
        else if ((r.source == store::RangeSource::Annotation || r.source == store::RangeSource::Nvtx) &&
                 !detail::is_profiler_step_range(t.str(r.name)))
          annotation = n;
      }
      if (b.range >= 0 && op.empty()) op = b.name;
      stack += (stack.empty() ? "" : " > ") + b.name;
      bool in_steps = b.step >= 0;
      std::string key = std::string(in_steps ? "1" : "0") + b.name + "|" + b.what.substr(0, b.what.find(',')) + "|" + op + "|" + annotation;
      auto& g = groups[key];
      if (g.count == 0) g = Group{b.name, b.what.substr(0, b.what.find(',')), op, annotation, stack, in_steps, 0, 0, 0};
      g.count++, g.blocked_ns += b.end - b.start, g.idle_ns += b.idle_ns;
      if (b.in_step_idle_ns > 0 && f.ranges.size() < kMaxRangesPerFinding) f.ranges.push_back({b.start, b.tail_end});
    }
    std::vector<const Group*> sorted;
    for (auto& [k, g] : groups) sorted.push_back(&g);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) {
      return a->idle_ns > b->idle_ns || (a->idle_ns == b->idle_ns && a->blocked_ns > b->blocked_ns);
    });

    // Calls that look like syncs but never block the host: counted so the report can say so.
    std::unordered_map<store::StringId, int> nb_class;
    std::map<std::string, int64_t> nonblocking;
    for (const auto& a : t.api_calls) {
      auto it = nb_class.find(a.name);
      if (it == nb_class.end()) {
        const auto& n = t.str(a.name);
        bool nb = n.find("EventQuery") != std::string::npos || n.find("StreamWaitEvent") != std::string::npos ||
                  n.find("StreamQuery") != std::string::npos || n.find("EventRecord") != std::string::npos;
        it = nb_class.emplace(a.name, nb ? 1 : 0).first;
      }
      if (it->second) nonblocking[t.str(a.name)]++;
    }

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("sync_idle_share", share);
    write_severity_evidence(w, *decision);
    w.kv("framework", ctx.framework);
    auto write_groups = [&](bool in_steps) {
      size_t n = 0;
      for (auto* g : sorted) {
        if (g->in_steps != in_steps || n++ >= kMaxGroups) continue;
        w.begin_object().kv("api", g->api);
        if (!g->what.empty()) w.kv("copy", g->what);
        w.kv("op", g->op).kv("annotation", g->annotation).kv("stack", g->stack);
        w.kv("count", g->count).kv("host_blocked_us", double(g->blocked_ns) / 1000.0).kv("gpu_idle_us", double(g->idle_ns) / 1000.0);
        w.end_object();
      }
    };
    w.key("blocking_calls").begin_array();
    write_groups(true);
    w.end_array();
    w.key("outside_steps").begin_array();
    write_groups(false);
    w.end_array();
    w.key("not_blocking").begin_object();
    for (auto& [n, c] : nonblocking) w.kv(n, c);
    w.end_object();
    w.end_object();
    f.evidence_json = std::move(ev);

    std::string who;
    for (size_t i = 0; i < sorted.size() && i < 2; ++i) {
      if (!sorted[i]->in_steps) continue;
      const auto* g = sorted[i];
      who += (who.empty() ? "" : "; ") + g->api;
      if (!g->op.empty() && g->op != g->api) who += " in " + g->op;
      if (!g->annotation.empty()) who += " under " + g->annotation;
    }
    std::string outside;
    for (auto* g : sorted)
      if (!g->in_steps && g->idle_ns > 0) {
        outside = "; outside the steps " + g->api + " leaves the GPU idle " + format_us(double(g->idle_ns));
        break;
      }
    f.summary = "The GPU idles " + format_us(per_step) + " per step (" + format_pct(share) +
                ") while the host blocks on the device" + (who.empty() ? "" : ": " + who) + outside + ".";
    if (ctx.framework == "tensorflow") {
      f.suggestion =
          "Keep the host from waiting on the GPU inside the step: no per-step .numpy()/float()/tf.print of tensors;\n"
          "keep metrics on the device (tf.keras.metrics, tf.summary inside tf.function) and read them every N steps;\n"
          "run several steps per call:\n"
          "  model.compile(..., steps_per_execution=32)\n"
          "  @tf.function  # the loop body as one graph: no host round trip per op";
    } else if (ctx.framework == "jax") {
      f.suggestion =
          "Keep the host from waiting on the device inside the step: no per-step float(loss)/jax.device_get/\n"
          ".block_until_ready(); accumulate metrics in the jitted step and fetch them every N steps:\n"
          "  state, metrics = train_step(state, batch)     # jitted, dispatched asynchronously\n"
          "  if step % 100 == 0: print(jax.device_get(metrics))";
    } else if (ctx.framework == "cuda") {
      f.suggestion =
          "Keep the host from waiting on the device inside the step: replace cudaDeviceSynchronize/\n"
          "cudaStreamSynchronize by events that only the dependent work waits on, and copy results into pinned\n"
          "memory asynchronously, reading them a step later:\n"
          "  cudaEventRecord(done, stream);  cudaStreamWaitEvent(other, done, 0);   // not cudaDeviceSynchronize()\n"
          "  cudaMallocHost(&host, bytes);  cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream);";
    } else {
      f.suggestion =
          "Keep the host from waiting on the GPU inside the step: drop per-step .item()/.cpu()/print of tensors\n"
          "(accumulate on the GPU, read once per N steps), copy with non_blocking=True into pinned buffers, and\n"
          "wait on events instead of the device:\n"
          "  loss_sum += loss.detach()                  # not loss.item()\n"
          "  host = torch.empty_like(t, device='cpu', pin_memory=True); host.copy_(t, non_blocking=True)\n"
          "  ev = torch.cuda.Event(); ev.record(); ...; ev.synchronize()   # not torch.cuda.synchronize()";
    }
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_sync_stall_rule() { return std::make_unique<SyncStallRule>(); }

}  // namespace stepscope::analyzer::rules
