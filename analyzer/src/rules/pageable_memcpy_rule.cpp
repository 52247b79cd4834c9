// pageable-memcpy: host<->device copies from/to pageable memory are staged and hold the host.
#include <algorithm>
#include <map>

#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class PageableMemcpyRule final : public Rule {
 public:
  // Severity by estimated saving as a share of step time.
  static constexpr double kHighShare = 0.05;
  static constexpr double kMediumShare = 0.01;
  // Pinned transfers run about this much faster than pageable ones (no staging copy); used when the
  // copy's API call is unknown.
  static constexpr double kPinnedSpeedup = 2.0;

  const char* id() const override { return "pageable-memcpy"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    const store::Trace& t = ctx.t();
    if (ctx.traced_step_ns <= 0) return;
    std::map<int32_t, int64_t> saved_per_step;
    struct Group {
      int64_t count = 0, bytes = 0, copy_ns = 0, call_ns = 0;
      std::string api;
    };
    std::map<std::string, Group> groups;
    FindingResult f;
    f.rule = id();
    int64_t total = 0;
    for (const auto& op : ctx.ops) {
      if (op.kind != detail::GpuOpKind::Memcpy) continue;
      const auto& m = t.memcpys[op.index];
      if (m.src_kind != store::MemoryKind::Pageable && m.dst_kind != store::MemoryKind::Pageable) continue;
      if (m.kind != store::CopyKind::HtoD && m.kind != store::CopyKind::DtoH) continue;
      ++total;
      int64_t call = op.api >= 0 ? t.api_calls[op.api].end - t.api_calls[op.api].start : 0;
      // The host waits for the transfer itself (an async copy from pinned memory would let it run on), and
      // the staged transfer is slower. Time the call spends waiting for earlier GPU work is sync-stall's.
      int64_t held = 0;
      if (op.api >= 0) {
        const auto& a = t.api_calls[op.api];
        held = std::max<int64_t>(0, std::min(a.end, m.end) - std::max(a.start, m.start));
      }
      int64_t saved = std::max(held, int64_t(double(m.end - m.start) * (1.0 - 1.0 / kPinnedSpeedup)));
      // Never more than the copy's own time, and only once (the ledger).
      saved = std::min(saved, ledger.claim(m.start, m.end));
      std::string key = std::string(store::to_string(m.kind)) + " " + store::to_string(m.src_kind) + " -> " +
                        store::to_string(m.dst_kind);
      auto& g = groups[key];
      g.count++, g.bytes += m.bytes, g.copy_ns += m.end - m.start, g.call_ns += call;
      if (op.api >= 0 && g.api.empty()) g.api = t.str(t.api_calls[op.api].name);
      if (op.step >= 0) saved_per_step[op.step] += saved;
      if (f.ranges.size() < kMaxRangesPerFinding)
        f.ranges.push_back({op.api >= 0 ? std::min(t.api_calls[op.api].start, m.start) : m.start, m.end});
    }
    if (total == 0) return;
    auto decision = conclude_finding(ctx, saved_per_step, kHighShare, kMediumShare, f);
    if (!decision) return;

    std::string ev;
    JsonWriter w(ev);
    w.begin_object().kv("copies", total);
    write_severity_evidence(w, *decision);
    w.key("kinds").begin_array();
    for (auto& [k, g] : groups)
      w.begin_object()
          .kv("kind", k)
          .kv("api", g.api)
          .kv("count", g.count)
          .kv("bytes", g.bytes)
          .kv("copy_us", double(g.copy_ns) / 1000.0)
          .kv("host_call_us", double(g.call_ns) / 1000.0)
          .end_object();
    w.end_array().end_object();
    f.evidence_json = std::move(ev);
    f.summary = std::to_string(total) + " host<->device copies use pageable host memory (staged, and the host waits for them).";
    if (ctx.framework == "cuda")
      f.suggestion =
          "Copy from page-locked (pinned) memory so copies run asynchronously at full bandwidth:\n"
          "  cudaMallocHost(&host_buf, bytes);           // or cudaHostRegister(existing, bytes, cudaHostRegisterDefault)\n"
          "  cudaMemcpyAsync(dev, host_buf, bytes, cudaMemcpyHostToDevice, stream);\n"
          "  // device -> host: cudaMemcpyAsync into a pinned buffer, cudaEventRecord, wait on the event when needed";
    else if (ctx.framework == "tensorflow")
      f.suggestion =
          "Let TensorFlow stage the copies from pinned memory ahead of the step:\n"
          "  ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0'))   # last stage of the input pipeline\n"
          "and keep results on the device instead of calling .numpy() inside the step.";
    else
      f.suggestion =
          "Copy from page-locked (pinned) memory so copies run asynchronously at full bandwidth:\n"
          "  loader = DataLoader(ds, ..., pin_memory=True)\n"
          "  x = x.pin_memory().to('cuda', non_blocking=True)          # host -> device\n"
          "  host_buf = torch.empty(shape, dtype=dt, pin_memory=True)\n"
          "  host_buf.copy_(y, non_blocking=True); event.record(); ...; event.synchronize()  # device -> host\n"
          "In CUDA C++: cudaMallocHost / cudaHostRegister for the host buffer, then cudaMemcpyAsync.";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_pageable_memcpy_rule() { return std::make_unique<PageableMemcpyRule>(); }

}  // namespace stepscope::analyzer::rules
