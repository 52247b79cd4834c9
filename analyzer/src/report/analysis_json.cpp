// Every JSON writer of the single-trace analysis (stepscope.analysis/1, docs/analysis-json.md) and the findings
// it stores: the report room's, once.
#include "stepscope/analyzer/analysis_json.h"

#include <algorithm>

#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer {
namespace {

double us(int64_t ns) { return double(ns) / 1000.0; }

// "critical_path": the steady steps' critical path by kind, and each step's longest stretches.
void write_critical_path(JsonWriter& w, const CriticalPaths& cp) {
  auto kinds = [&w](const int64_t (&ns)[kPathKinds]) {
    w.begin_object();
    for (int k = 0; k < kPathKinds; ++k) w.kv(to_string(PathKind(k)), us(ns[k]));
    w.end_object();
  };
  w.key("critical_path").begin_object().kv("steady_us", us(cp.total_ns)).kv("segments", cp.segments).key("by_kind_us");
  kinds(cp.ns);
  w.key("steps").begin_array();
  for (const auto& p : cp.steps) {
    w.begin_object().kv("index", p.step).kv("segments", p.segments).key("by_kind_us");
    kinds(p.ns);
    w.key("longest").begin_array();
    for (const auto& sg : p.longest)
      w.begin_object()
          .kv("kind", to_string(sg.kind))
          .kv("start_us", us(sg.start))
          .kv("dur_us", us(sg.end - sg.start))
          .kv("what", sg.what)
          .end_object();
    w.end_array().end_object();
  }
  w.end_array().end_object();
}

// "what_if": the steps replayed unchanged and with each finding's cure.
void write_what_if(JsonWriter& w, const WhatIf& wi) {
  w.key("what_if").begin_object().kv("steps", wi.steps);
  if (wi.empty()) {
    w.kv("note", wi.note);
  } else {
    w.kv("recorded_step_us", wi.recorded_step_us)
        .kv("identity_step_us", wi.identity_step_us)
        .kv("replayed_step_us", wi.replayed_step_us)
        .kv("combined_step_us", wi.combined_step_us)
        .key("cures")
        .begin_array();
    for (const auto& c : wi.cures)
      w.begin_object()
          .kv("rule", c.rule)
          .kv("cure", c.cure)
          .kv("step_us", c.step_us)
          .kv("saving_us", c.saving_us)
          .end_object();
    w.end_array();
  }
  w.end_object();
}

}  // namespace

std::string finding_to_json(const FindingResult& f) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.kv("rule", f.rule).kv("severity", store::to_string(f.severity));
  w.key("steps").begin_array();
  for (auto s : f.steps) w.value(s);
  w.end_array();
  w.kv("est_savings_us_per_step", f.est_savings_us_per_step).kv("share", f.share);
  if (!f.replayed_cure.empty())
    w.key("replayed")
        .begin_object()
        .kv("cure", f.replayed_cure)
        .kv("step_us", f.replayed_step_us)
        .kv("saving_us", f.replayed_saving_us)
        .end_object();
  w.kv("summary", f.summary).kv("suggestion", f.suggestion);
  w.key("ranges").begin_array();
  for (const auto& r : f.ranges) w.begin_array().value(us(r.start_ns)).value(us(r.end_ns)).end_array();
  w.end_array();
  w.key("evidence").raw(f.evidence_json.empty() ? "{}" : f.evidence_json);
  w.end_object();
  return out;
}

std::string to_json(const Analysis& a) {
  std::string out;
  JsonWriter w(out);
  const auto& s = a.summary;
  w.begin_object();
  w.kv("schema", "stepscope.analysis/1");
  if (!a.source_file.empty()) w.kv("source_file", a.source_file);
  w.key("summary").begin_object();
  w.kv("kernels", s.kernels).kv("memcpys", s.memcpys).kv("memsets", s.memsets);
  w.kv("gpu_busy_us", s.gpu_busy_us).kv("gpu_span_us", s.gpu_span_us);
  w.kv("steps", s.steps).kv("step_source", s.step_source).kv("step_confidence", s.step_confidence);
  w.kv("data_wait_share", s.data_wait_share).kv("input_idle_share", s.input_idle_share).kv("gpu_busy_share", s.gpu_busy_share);
  w.kv("has_gpu", s.has_gpu).kv("step_time_us", s.step_time_us).kv("traced_step_time_us", s.traced_step_time_us).kv("framework", s.framework);
  w.kv("gpu_window", s.gpu_window).kv("gpu_traced_steps", s.gpu_traced_steps);
  if (!s.cuda_lent.empty()) w.kv("cuda_lent", s.cuda_lent);
  w.kv("python_hooks", s.python_hooks).kv("steps_advice", steps_advice(s));
  w.kv("unread_device_events", s.unread_device_events);
  w.kv("malformed_events", s.malformed_events);
  if (!s.flight_trigger.empty()) {
    w.key("flight").begin_object();
    w.kv("trigger", s.flight_trigger).kv("detail", s.flight_detail).kv("step", s.flight_step);
    w.kv("gpu_steps", s.flight_gpu_steps);
    w.end_object();
  }
  w.kv("host_step_median_us", s.host_step_median_us).kv("gpu_step_median_us", s.gpu_step_median_us);
  w.kv("host_runs_ahead", s.host_runs_ahead);
  w.key("idle_us").begin_object();
  w.kv("data_wait", s.data_wait_idle_us).kv("launch", s.launch_idle_us).kv("sync", s.sync_idle_us).kv("host", s.host_idle_us);
  w.kv("other", s.other_idle_us).kv("profiler", s.profiler_us);
  w.end_object();
  w.key("profiler").begin_object();
  w.kv("applied", s.profiler.applied).kv("source", s.profiler.source);
  if (s.profiler.applied) {
    w.kv("cost_us_per_launch", s.profiler.cost_ns_per_launch / 1000.0).kv("launches", s.profiler.launches);
    w.kv("removed_us", s.profiler.removed_us).kv("step_median_us", s.profiler.step_median_us);
    w.kv("corrected_step_median_us", s.profiler.corrected_step_median_us);
  }
  if (s.profiler.hook_ns_per_step_call > 0 || s.profiler.hook_ns_per_wait_call > 0) {
    w.kv("python_hook_us_per_step_call", s.profiler.hook_ns_per_step_call / 1000.0)
        .kv("python_hook_step_calls", s.profiler.hook_step_calls);
    w.kv("python_hook_us_per_wait_call", s.profiler.hook_ns_per_wait_call / 1000.0)
        .kv("python_hook_wait_calls", s.profiler.hook_wait_calls);
  }
  w.end_object();
  w.end_object();
  // gpu_steps (the steps in the GPU's time when the host runs ahead) have the same fields, profiler_us 0.
  for (const auto* rows : {&a.steps, &a.gpu_steps}) {
    w.key(rows == &a.steps ? "steps" : "gpu_steps").begin_array();
    for (const auto& st : *rows) {
      w.begin_object()
          .kv("index", st.index)
          .kv("start_us", us(st.start_ns))
          .kv("dur_us", us(st.dur_ns))
          .kv("gpu_busy_us", us(st.gpu_busy_ns))
          .kv("data_wait_us", us(st.data_wait_ns))
          .kv("launch_idle_us", us(st.launch_idle_ns))
          .kv("sync_idle_us", us(st.sync_idle_ns))
          .kv("host_idle_us", us(st.host_idle_ns))
          .kv("other_idle_us", us(st.other_idle_ns))
          .kv("profiler_us", us(st.profiler_ns))
          .kv("bound", to_string(st.bound))
          .kv("gpu_traced", st.gpu_traced)
          .kv("warmup", st.warmup)
          .kv("kernels", st.kernels)
          .kv("host_data_wait_us", us(st.host_data_wait_ns));
      if (!st.device_busy_ns.empty()) {
        w.key("devices").begin_array();
        for (auto [dev, ns] : st.device_busy_ns) w.begin_object().kv("device", dev).kv("gpu_busy_us", us(ns)).end_object();
        w.end_array();
      }
      w.end_object();
    }
    w.end_array();
  }
  w.key("findings").begin_array();
  for (const auto& f : a.findings) w.raw(finding_to_json(f));
  w.end_array();
  w.key("top_kernels").begin_array();
  for (const auto& k : a.top_kernels)
    w.begin_object()
        .kv("name", k.name)
        .kv("count", k.count)
        .kv("total_us", us(k.total_ns))
        .kv("mean_us", k.mean_ns() / 1000.0)
        .kv("min_us", us(k.min_ns))
        .kv("max_us", us(k.max_ns))
        .end_object();
  w.end_array();
  const HostActivity& ha = a.host_activity;
  w.key("idle_host_top").begin_array();
  for (const auto& h : ha.functions) {
    w.begin_object()
        .kv("name", h.name)
        .kv("samples", h.samples)
        .kv("periods", h.periods)
        .kv("time_us", us(h.time_ns))
        .kv("on_cpu", h.on_cpu);
    // Samples only: ops' exclusive times have no stack to walk.
    if (ha.source == "samples") w.kv("inclusive_us", us(h.inclusive_ns));
    w.end_object();
  }
  w.end_array();
  w.key("host_activity").begin_object();
  w.kv("window", ha.window).kv("window_us", us(ha.window_ns)).kv("source", ha.source);
  w.kv("pid", ha.pid).kv("tid", ha.tid).kv("thread_name", ha.thread_name).kv("thread_reason", ha.thread_reason);
  w.kv("sample_period_us", us(ha.sample_period_ns)).kv("period_source", ha.period_source).kv("wall", ha.wall);
  w.kv("on_cpu_us", us(ha.on_cpu_ns)).kv("off_cpu_us", us(ha.off_cpu_ns));
  w.key("other_threads").begin_array();
  for (const auto& o : ha.other_threads)
    w.begin_object()
        .kv("pid", o.pid)
        .kv("tid", o.tid)
        .kv("name", o.name)
        .kv("samples", o.samples)
        .kv("on_cpu_us", us(o.on_cpu_ns))
        .kv("other_process", o.other_process)
        .end_object();
  w.end_array();
  w.end_object();
  w.key("step_outliers").raw(step_outliers_to_json(a.step_outliers));
  w.key("gpu_breakdowns").raw(gpu_breakdowns_to_json(a.gpu_breakdowns));
  w.key("graphs").raw(graph_table_to_json(a.graphs));
  write_critical_path(w, a.critical_path);
  write_what_if(w, a.what_if);
  w.key("utilization").begin_object().kv("bucket_us", us(a.utilization_bucket_ns)).key("busy").begin_array();
  for (double u : a.utilization) w.value(u);
  w.end_array().end_object();
  w.end_object();
  out += '\n';
  return out;
}

void store_findings(const Analysis& a, store::Trace& t) {
  t.findings.clear();
  for (const auto& f : a.findings) {
    store::Finding r;
    r.rule = t.intern(f.rule);
    r.severity = f.severity;
    if (!f.steps.empty()) {
      r.first_step = *std::min_element(f.steps.begin(), f.steps.end());
      r.last_step = *std::max_element(f.steps.begin(), f.steps.end());
    }
    r.est_savings_ns = f.est_savings_us_per_step * 1000.0;
    r.message = t.intern(f.summary);
    r.evidence_json = finding_to_json(f);
    t.findings.push_back(std::move(r));
  }
}

std::string step_outliers_to_json(const StepOutliers& o) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.kv("median_us", us(o.median_ns)).kv("noise_us", us(o.noise_ns)).kv("threshold_us", us(o.threshold_ns));
  w.kv("slow_count", o.slow_count);
  w.kv("steps", o.steps);
  if (o.gpu_time) w.kv("gpu_time", true);
  w.key("slow").begin_array();
  for (const auto& s : o.slow) {
    w.begin_object().kv("index", s.index).kv("start_us", us(s.start_ns)).kv("dur_us", us(s.dur_ns)).kv("excess_us", us(s.excess_ns));
    w.kv("category", s.category).kv("category_us", us(s.category_ns)).kv("category_median_us", us(s.category_median_ns));
    if (!s.contributor_kind.empty())
      w.key("contributor")
          .begin_object()
          .kv("kind", s.contributor_kind)
          .kv("name", s.contributor)
          .kv("us", us(s.contributor_ns))
          .kv("median_us", us(s.contributor_median_ns))
          .end_object();
    if (s.off_cpu_ns >= 0)
      w.kv("off_cpu_us", us(s.off_cpu_ns))
          .kv("off_cpu_median_us", us(s.off_cpu_median_ns))
          .kv("not_running", s.not_running);
    w.kv("startup", s.startup).kv("explanation", s.explanation).end_object();
  }
  w.end_array().end_object();
  return out;
}

std::string gpu_breakdowns_to_json(const GpuBreakdowns& b) {
  std::string out;
  JsonWriter w(out);
  auto dist = [&w](const char* key, const Distribution& d) {
    w.key(key).begin_object().kv("mean_us", d.mean_us).kv("p50_us", d.p50_us).kv("p90_us", d.p90_us);
    w.kv("p99_us", d.p99_us).kv("max_us", d.max_us).end_object();
  };
  w.begin_object();
  w.key("kernel_types").begin_array();
  for (const auto& k : b.kernel_types)
    w.begin_object().kv("type", k.type).kv("us", us(k.ns)).kv("percent", k.percent).end_object();
  w.end_array();
  const LaunchStats& l = b.launch;
  w.key("launch_stats").begin_object().kv("count", l.count);
  dist("cpu_duration", l.cpu_duration);
  dist("gpu_duration", l.gpu_duration);
  dist("launch_delay", l.launch_delay);
  w.kv("gpu_shorter_than_cpu", l.gpu_shorter_than_cpu);
  w.kv("runtime_cutoff_us", LaunchStats::kRuntimeCutoffUs).kv("cpu_over_cutoff", l.cpu_over_cutoff);
  w.kv("launch_delay_cutoff_us", LaunchStats::kLaunchDelayCutoffUs).kv("delay_over_cutoff", l.delay_over_cutoff);
  w.key("longest_delays").begin_array();
  for (const auto& o : l.longest_delays)
    w.begin_object()
        .kv("api", o.api)
        .kv("name", o.name)
        .kv("correlation", o.correlation)
        .kv("call_start_us", us(o.call_start_ns))
        .kv("delay_us", o.delay_us)
        .end_object();
  w.end_array().end_object();
  w.key("queues").begin_array();
  for (const auto& q : b.queues)
    w.begin_object()
        .kv("device", q.device)
        .kv("stream", q.stream)
        .kv("events", q.events)
        .kv("mean", q.mean)
        .kv("std", q.std)
        .kv("min", q.min)
        .kv("p25", q.p25)
        .kv("p50", q.p50)
        .kv("p75", q.p75)
        .kv("max", q.max)
        .kv("us_at_max", us(q.ns_at_max))
        .end_object();
  w.end_array();
  w.key("annotations").begin_array();
  for (const auto& a : b.annotations)
    w.begin_object()
        .kv("name", a.name)
        .kv("count", a.count)
        .kv("sum_us", a.sum_us)
        .kv("mean_us", a.mean_us)
        .kv("min_us", a.min_us)
        .kv("max_us", a.max_us)
        .kv("std_us", a.std_us)
        .end_object();
  w.end_array();
  w.end_object();
  return out;
}

std::string graph_table_to_json(const GraphTable& g) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.kv("records", g.records).kv("ids", g.ids);
  w.kv("replays", int64_t(g.replays.size())).kv("gpu_records", g.gpu_records);
  w.kv("replayed_records", g.replayed_records).kv("eager_kernels", g.eager_kernels);
  w.key("graphs").begin_array();
  for (const auto& s : g.graphs) {
    w.begin_object().kv("pid", s.pid).kv("graph_id", s.graph_id).kv("replays", s.replays).kv("whole_replays", s.whole);
    auto range = [&](const char* key, int64_t lo, int64_t hi) {
      w.key(key);
      if (s.whole) w.null();
      else w.begin_object().kv("min", lo).kv("max", hi).end_object();
    };
    range("nodes_per_replay", s.nodes_min, s.nodes_max);
    range("kernels_per_replay", s.kernels_min, s.kernels_max);
    w.kv("gpu_us_per_replay", s.gpu_us).kv("span_us_per_replay", s.span_us);
    w.key("idle_inside_us_per_replay");
    if (s.whole) w.null();
    else w.value(s.idle_inside_us);
    w.kv("launch_calls", s.launch_calls).kv("launch_us_per_replay", s.launch_us);
    w.kv("idle_before_replays", s.idle_before_count).kv("idle_before_us_per_replay", s.idle_before_us);
    w.kv("idle_before_median_us", s.idle_before_median_us).kv("eager_ops_between", s.eager_ops_before);
    w.kv("first_kernel", s.first_kernel).kv("captured_at", s.captured_at).kv("capture_kind", store::to_string(s.kind));
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return out;
}

}  // namespace stepscope::analyzer
