// The timeline's data model, free of any widget code: tracks grouped by process and device, each holding
// lanes (one per nesting depth) of events sorted by start time. Built once from a store::Trace (and the
// analyzer's result when there is one); every later query (level of detail, hit-testing, details) reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/records.h"
#include "stepscope/store/store.h"

namespace stepscope::gui {

// What table of the trace an event row comes from.
// PathSegment: a stretch of the analyzer's critical path (row: index into analysis()->critical_path.path).
// GraphReplay: one replay of a CUDA/HIP graph on one stream (row: index into TimelineModel::replays()).
// RankPath: a stretch of the job's critical path across ranks (row: index into CrossRank::path).
// RankWait: a collective that waited for the straggler, on the rank that waited (row: index into CrossRank::delayed).
enum class EventKind : uint8_t {
  Kernel,
  Memcpy,
  Memset,
  ApiCall,
  Range,
  Sync,
  DataWait,
  Step,
  Finding,
  PathSegment,
  GraphReplay,
  RankPath,
  RankWait
};
const char* to_string(EventKind k);

struct EventRef {
  EventKind kind = EventKind::Kernel;
  uint32_t row = 0;  // index into the trace table for `kind` (steps/findings: index into the model's lists)
  bool operator==(const EventRef&) const = default;
};

// One row of non-overlapping-by-construction events, sorted by start. Stored column-wise and compactly
// (17 bytes per event, 13 when a lane holds one kind): a binary search over `starts` touches only the times,
// ends are 32-bit durations (the rare event of 4.3 s or more keeps its duration in `long_durs`), and a lane
// of a single event kind stores the kind once.
struct Lane {
  static constexpr uint32_t kLongDur = 0xFFFFFFFFu;  // durs[i]: the duration is in long_durs
  std::vector<int64_t> starts;
  std::vector<uint32_t> durs;  // end - start, ns
  std::vector<uint32_t> rows;
  std::vector<EventKind> kinds;  // empty when every event is of kind `kind_all`
  EventKind kind_all = EventKind::Kernel;
  std::vector<std::pair<uint32_t, int64_t>> long_durs;  // (index, duration), sorted by index
  // Prefix maximum of the ends; empty when the ends are already non-decreasing (the usual case), so the
  // first event ending after t is one binary search either way.
  std::vector<int64_t> max_end;
  // busy_marks[k]: the summed durations of events [0, k · kBusyStride): how busy a zoomed-out lane is over any
  // span, in two binary searches and at most 2 · kBusyStride additions, for a quarter byte an event.
  static constexpr size_t kBusyStride = 32;
  std::vector<int64_t> busy_marks;

  size_t size() const { return starts.size(); }
  int64_t dur(size_t i) const { return durs[i] != kLongDur ? int64_t(durs[i]) : long_dur(i); }
  int64_t end(size_t i) const { return starts[i] + dur(i); }
  EventKind kind(size_t i) const { return kinds.empty() ? kind_all : kinds[i]; }
  int64_t max_end_at(size_t i) const { return max_end.empty() ? end(i) : max_end[i]; }
  EventRef ref(size_t i) const { return {kind(i), rows[i]}; }
  // First index whose event (or an earlier one) ends after t.
  size_t first_ending_after(int64_t t) const;
  // First index whose start is >= t, searching from `from`.
  size_t first_starting_at_or_after(int64_t t, size_t from = 0) const;
  // Heap bytes held by the lane's columns.
  size_t bytes() const;
  // Summed durations of events [0, i).
  int64_t summed_dur(size_t i) const;
  // Time before t covered by the lane's events: one binary search and at most kBusyStride additions.
  int64_t covered_before(int64_t t) const;
  // Time inside [a, b) covered by the lane's events (their overlaps with it, summed; at most b - a).
  int64_t busy_in(int64_t a, int64_t b) const;
  // Fills busy_marks (after the columns are complete).
  void index_busy();

 private:
  int64_t long_dur(size_t i) const;
};

// RankLane: one rank of a job opened as a directory of ranks: its stretches of the job's critical path and its
// collectives that waited for the straggler.
enum class TrackKind : uint8_t { Steps, Findings, CriticalPath, CpuSamples, CpuRanges, DataWaits, GpuStream, RankLane };
const char* to_string(TrackKind k);
// Steps and findings tile the run: zoomed out, a run of them is a block of steps, drawn a pixel apart, never a busy
// share.
inline bool tiles_the_run(TrackKind k) {
  return k == TrackKind::Steps || k == TrackKind::Findings || k == TrackKind::CriticalPath || k == TrackKind::RankLane;
}

struct Track {
  TrackKind kind = TrackKind::CpuRanges;
  std::string group;  // "Process 1234 python", "GPU 0 NVIDIA A100", "Analysis"
  std::string title;  // "Thread 1234 python", "Stream 7", "Steps"
  int64_t pid = 0, tid = 0, device = -1, stream = -1;
  // Part of its process's "N other threads" row: a thread that neither launches GPU work nor waits for data.
  bool folded = false;
  int64_t busy_ns = 0;  // GpuStream: summed activity time (streams are ordered by it)
  std::vector<Lane> lanes;
  // GpuStream only: the kernels, copies and memsets of its CUDA graph replays. `lanes` holds one GraphReplay block
  // per replay in their place; a stream whose replays are open (LayoutState::open_graphs) draws these lanes under
  // the blocks, numbered after `lanes`.
  std::vector<Lane> graph_lanes;
  // Some replay on it holds its nodes (not one interval a replay, gpu.graph_records = "graph"): it opens.
  bool graphs_open_inside = false;
  // CpuSamples only: sample times (sorted) and their rows in trace.samples.
  std::vector<int64_t> sample_times;
  std::vector<uint32_t> sample_rows;
  // CpuSamples of a `--wall` recording (some sample off the CPU): on-CPU samples before each index (size +
  // 1), so the row's height is the thread's time on the CPU (a 150 ms sleep drew as dense as compute); else
  // empty.
  std::vector<uint32_t> on_cpu_before;
  int lane_count() const { return kind == TrackKind::CpuSamples ? 1 : static_cast<int>(lanes.size()); }
  // Lane i of lanes followed by graph_lanes.
  const Lane& lane_at(size_t i) const { return i < lanes.size() ? lanes[i] : graph_lanes[i - lanes.size()]; }
  size_t all_lanes() const { return lanes.size() + graph_lanes.size(); }
};

// One replay of a CUDA/HIP graph as the timeline draws it: the GPU rows of one launch (one correlation; without
// one, consecutive rows of one graph) on one stream, spanning the first one's start to the last one's end.
struct GraphReplay {
  int64_t pid = 0, device = 0, stream = 0, graph_id = 0, correlation = 0;
  int64_t start = 0, end = 0;
  uint32_t first = 0, count = 0;  // its rows: TimelineModel::replay_records
  // Recorded as one interval (gpu.graph_records = "graph", or a recording older than v4): the single kernel row
  // named "CUDA graph N" is the whole replay, and what ran inside it was not recorded.
  bool whole = false;
};

// Where a replayed node came from: its graph_nodes row, and, for a node of an instantiated (or cloned) graph, the
// node it was cloned from (source_node_id, followed to the node that was captured or created).
struct GraphNodeOrigin {
  const store::GraphNode* node = nullptr;      // the node that ran (kernels.graph_node_id)
  const store::GraphNode* captured = nullptr;  // the node it came from; == node when it has no source
  const store::Graph* graph = nullptr;         // graphs row of node->graph_id
  const store::Graph* captured_graph = nullptr;  // graphs row of captured->graph_id
};

// A step as the timeline shows it (the analyzer's breakdown when present, else the stored step).
struct StepInfo {
  int64_t index = 0, start = 0, end = 0;
  std::string bound;  // "input", "launch", "sync", "host", "gpu" or "" when not analyzed
  bool warmup = false;  // the analyzer's warm-up step (StepBreakdown::warmup): start-up, not the loop
};

// A finding as the timeline shows it (the analyzer's result when present, else the stored finding).
struct FindingInfo {
  std::string rule, severity, summary, suggestion, evidence_json;
  std::vector<int64_t> steps;                       // step indexes
  std::vector<std::pair<int64_t, int64_t>> ranges;  // evidence time ranges
  double est_savings_us_per_step = 0, share = 0;
  // The what-if replay of its cure (analyzer::FindingResult): "" when none ran; the step replayed with the
  // cure and what that saves, and the sentence when the estimate and the replay differ
  // (estimate_replay_sentence).
  std::string replayed_cure, replay_note;
  double replayed_step_us = 0, replayed_saving_us = 0;
  int64_t start = 0, end = 0;  // extent: the union of its steps and ranges
  // A finding of the cross-rank analysis (`straggler`, `exposed-comm`): `steps` are aligned step indexes and
  // `ranges` each such step across every rank on the merged clock; its extent is its first step.
  bool cross_rank = false;
  // In a folder of ranks the ranks' findings of one rule share a lane, drawn by the most severe of them: the
  // finding whose blocks stand for this one (-1: its own) and, on that one, how many findings its blocks
  // stand for.
  int32_t drawn_by = -1;
  uint32_t drawn_for = 1;
};

// A finding's severity in order: 0 low, 1 medium, 2 high.
inline int severity_rank(const std::string& severity) {
  return severity == "high" ? 2 : severity == "medium" ? 1 : 0;
}

// An analysis' finding as the model keeps it, but for its ranges (a single trace's lie on its clock, a cross-rank
// finding's are its steps across the ranks) and extent, which the caller sets.
FindingInfo finding_info(const analyzer::FindingResult& f);

// Several ranks of one job opened as a directory (`stepscope-gui DIR`, docs/multi-rank.md "GUI"): the cross-rank
// analysis (analyzer::analyze_ranks) and what the timeline draws of it. Times are on the merged trace's clock:
// rank i's own time (RankStep, CollectiveCall, PathRound) plus shift[i] (meta ranks.shift.<k>).
struct RankPathSegment {
  uint32_t rank = 0;      // index into MultiRankAnalysis::ranks
  int64_t step = 0;       // aligned step index
  uint32_t round = 0;     // its round in that step's path_rounds
  bool transfer = false;  // false: the rank's own work up to its arrival; true: the collective's transfer after it
  int64_t start = 0, end = 0;
};
struct DelayedCollective {
  uint32_t rank = 0;  // the rank that waited
  int64_t step = 0;
  const analyzer::CollectiveCall* call = nullptr;  // its call (points into CrossRank::analysis)
  int64_t wait_ns = 0;                             // its call minus the straggler's: the wait for it
  int64_t start = 0, end = 0;
};
struct CrossRank {
  std::shared_ptr<const analyzer::MultiRankAnalysis> analysis;
  std::vector<int64_t> shift;  // per rank index
  std::vector<int> merged;     // per rank index: its k in the merged trace (pids (k+1)·kRankPidBase+…), -1: absent
  std::vector<int> track;      // per rank index: its RankLane track
  int straggler = -1;          // rank index the `straggler` finding names, -1 when none
  std::vector<RankPathSegment> path;         // by aligned step, then round
  std::vector<DelayedCollective> delayed;    // the straggler's affected steps, by step
  std::string report;  // `stepscope analyze DIR`'s text (render_multirank_report)
};

const char* bound_name(analyzer::Bound b);

// What a model built from a store (TimelineModel::build_from_store) keeps of each row of a bulk table, as
// columns: start, 32-bit duration (events of 4.3 s or more in a side list) and 32-bit name id (ids that are
// negative or past 32 bits, which only a damaged store holds, in a side list).
struct TimedColumns {
  static constexpr uint32_t kOddName = 0xFFFFFFFFu;  // names[row]: the id is in odd_names
  std::vector<int64_t> starts;
  std::vector<uint32_t> durs;                                   // end - start; Lane::kLongDur: in long_durs
  std::vector<std::pair<uint32_t, int64_t>> long_durs;          // (row, duration), by row
  std::vector<uint32_t> names;                                  // string ids
  std::vector<std::pair<uint32_t, store::StringId>> odd_names;  // (row, id), by row

  size_t size() const { return starts.size(); }
  int64_t dur(uint32_t row) const;
  // Unsigned: from int64's least to its greatest time the duration is past int64 (stored wrapped).
  int64_t end(uint32_t row) const { return int64_t(uint64_t(starts[row]) + uint64_t(dur(row))); }
  store::StringId name(uint32_t row) const {
    return names[row] != kOddName ? store::StringId(names[row]) : odd_name(row);
  }
  store::StringId odd_name(uint32_t row) const;
  void reserve(size_t n);
  // Appends row size(); an end before the start is the start, as the rows' model draws it.
  void add(int64_t start, int64_t end, store::StringId name);
  size_t bytes() const;  // heap bytes held
};

// The kernels: 20 bytes a kernel (24 with launches) against store::Kernel's 120. A kernel's full row (grid,
// registers, context...) is read back from the store when asked (TimelineModel::kernel). The rows of CUDA
// graph replays keep their full rows: replays are gathered from them.
struct KernelColumns : TimedColumns {
  std::vector<uint32_t> streams;                         // index into stream_keys
  std::vector<std::pair<int64_t, int64_t>> stream_keys;  // (device, stream)
  std::vector<uint32_t> launches;  // its launch's api_calls row + 1, 0: none; empty when nothing was launched
  std::vector<std::pair<uint32_t, store::Kernel>>
      graph_rows;  // (row, full row) of rows with a graph id, by row

  const store::Kernel* graph_row(uint32_t row) const;  // nullptr: not a graph replay's row
  size_t bytes() const;                                // heap bytes held
};

// The API calls: 28 bytes a call against store::ApiCall's 72; kind, return code and stack are read back from
// the store when asked (TimelineModel::api_call).
struct ApiCallColumns : TimedColumns {
  std::vector<uint32_t> threads;                         // index into thread_keys
  std::vector<std::pair<int64_t, int64_t>> thread_keys;  // (pid, tid)
  std::vector<int64_t> correlations;
  size_t bytes() const;  // heap bytes held
};

class TimelineModel {
 public:
  // Takes shared ownership: draw lists built on worker threads keep the data alive.
  // `ranks`: the cross-rank analysis of the ranks merged in `trace` (merge_ranks_for_timeline); its findings come
  // first, and a RankLane track per rank draws the job's critical path.
  static std::shared_ptr<const TimelineModel> build(
      std::shared_ptr<const store::Trace> trace, std::shared_ptr<const analyzer::Analysis> analysis = {},
      std::shared_ptr<const analyzer::MultiRankAnalysis> ranks = {});

  // A stepscope store's timeline with its kernels kept as columns (KernelColumns, ~100 bytes a kernel less
  // than build()) and read back whole from `store` when asked. `trace`: the store's trace as
  // analyzer::load_trace read it (the one `analysis` came from): its kernels go into columns and are released
  // from it. Without one, the store's other tables are read here and its kernels stream in, never all in
  // memory as rows. Throws store::StoreError when `trace` does not hold the store's kernels (another file, or
  // one that changed since).
  static std::shared_ptr<const TimelineModel> build_from_store(
      std::shared_ptr<const store::StoreReader> store, std::shared_ptr<store::Trace> trace = {},
      std::shared_ptr<const analyzer::Analysis> analysis = {});

  // The trace the model was built from. Built from a store, its kernels are not in it: read them through
  // kernel_count(), kernel() and kernel_name().
  const store::Trace& trace() const { return *trace_; }
  size_t kernel_count() const { return kcols_ ? kcols_->size() : trace_->kernels.size(); }
  // Kernel `row` whole: from the trace, or read back from the store (throws store::StoreError when it cannot
  // be).
  store::Kernel kernel(uint32_t row) const;
  store::StringId kernel_name(uint32_t row) const {
    return kcols_ ? kcols_->name(row) : trace_->kernels[row].name;
  }
  size_t api_call_count() const { return acols_ ? acols_->size() : trace_->api_calls.size(); }
  // API call `row` whole: from the trace, or read back from the store (throws store::StoreError when it
  // cannot be).
  store::ApiCall api_call(uint32_t row) const;
  store::StringId api_call_name(uint32_t row) const {
    return acols_ ? acols_->name(row) : trace_->api_calls[row].name;
  }
  const ApiCallColumns* api_call_columns() const { return acols_ ? &*acols_ : nullptr; }
  // Built from a store: its kernel columns, else nullptr.
  const KernelColumns* kernel_columns() const { return kcols_ ? &*kcols_ : nullptr; }
  const analyzer::Analysis* analysis() const { return analysis_.get(); }
  // The cross-rank view of a directory of ranks; nullptr otherwise.
  const CrossRank* cross_rank() const { return cross_rank_ ? &*cross_rank_ : nullptr; }
  // Groups (processes and GPUs) of the straggler's rank: the view marks them.
  bool straggler_group(const std::string& group) const { return straggler_groups_.count(group) > 0; }
  // "rank 7" (an input without a rank: its file) for an index into MultiRankAnalysis::ranks.
  std::string rank_name(uint32_t rank_index) const;
  const std::vector<Track>& tracks() const { return tracks_; }
  const std::vector<StepInfo>& steps() const { return steps_; }
  const std::vector<FindingInfo>& findings() const { return findings_; }
  int64_t begin() const { return begin_; }  // earliest event
  int64_t end() const { return end_; }      // latest event end (> begin)
  size_t event_count() const { return event_count_; }
  // Heap bytes held by the lanes and sample columns of all tracks (the kernel columns:
  // kernel_columns()->bytes()).
  size_t lane_bytes() const;
  // The pid and device id as recorded (a trace of several ranks offsets them to keep ranks apart).
  int64_t shown_pid(int64_t pid) const;
  int64_t shown_device(int64_t device) const;

  int64_t start_of(EventRef e) const;
  int64_t end_of(EventRef e) const;
  // The name as displayed: C++ symbols (kernels, host ranges) shortened, see analyzer/display_names.h.
  std::string name_of(EventRef e) const;
  // The full name (demangled) for tooltips and details; equals name_of for names that were not shortened.
  std::string full_name_of(EventRef e) const;
  // Names the event's colour: a string id for named events (same name → same colour), or one of the
  // fixed keys below; the widget maps keys to palette colours.
  uint32_t colour_key(EventRef e) const;
  static constexpr uint32_t kMemcpyKey = 0xFFFF0000u;  // | CopyKind
  static constexpr uint32_t kMemsetKey = 0xFFFE0000u;
  static constexpr uint32_t kDataWaitKey = 0xFFFD0000u;
  static constexpr uint32_t kSyncKey = 0xFFFC0000u;
  static constexpr uint32_t kStepKey = 0xFFFB0000u;     // | bound code (bound_code())
  static constexpr uint32_t kFindingKey = 0xFFFA0000u;  // | Severity
  static constexpr uint32_t kPathKey = 0xFFF90000u;     // | analyzer::PathKind
  static constexpr uint32_t kGraphKey = 0xFFF80000u;    // | graph id & 0xFFFF
  static constexpr uint32_t kRankPathKey = 0xFFF70000u;  // | 1 for a transfer, 0 for own work
  static constexpr uint32_t kRankWaitKey = 0xFFF60000u;
  static constexpr uint32_t kSpecialMask = 0xFFF00000u;
  // 0 input, 1 launch, 2 sync, 3 host, 4 gpu, 5 unknown.
  static uint32_t bound_code(const std::string& bound);

  // Index of the step with this index value, or -1.
  int step_position(int64_t step_index) const;
  // The steps after start-up: from the first step that is not a warm-up step to the end of the last (and of the
  // GPU's own steps when the host runs ahead); the window opens on it. nullopt without steps.
  std::optional<std::pair<int64_t, int64_t>> steady_extent() const;
  // The finding to show first: the highest severity, then the largest share of step time; -1 when none.
  int worst_finding() const;
  // What the Details pane says of the run when there is no finding to show: the sentences `stepscope analyze`
  // prints above its table, in the same words (events of the file left out as malformed; no GPU activity; how to
  // mark steps when there were none).
  std::vector<std::string> run_notes() const;
  // Time extent of a finding (its steps and evidence ranges); nullopt when it has none.
  std::optional<std::pair<int64_t, int64_t>> finding_extent(size_t finding) const;

  // CUDA graph replays (GraphReplay events), in the order they were gathered (per stream, by start).
  const std::vector<GraphReplay>& replays() const { return replays_; }
  // A replay's kernels, copies and memsets, by start.
  std::vector<EventRef> replay_records(uint32_t replay) const;
  // The replay a kernel, copy or memset ran in (a GraphReplay row), or nullopt.
  std::optional<uint32_t> replay_of(EventRef gpu_event) const;
  // How the trace recorded graph replays: "nodes" (each replay's rows), "graph" (one interval a replay: meta
  // gpu.graph_records = "graph", or a stepscope recording older than v4, which said nothing and traced them so).
  const std::string& graph_records() const { return graph_records_; }
  // The graphs row of (pid, graph_id), or nullptr.
  const store::Graph* graph_row(int64_t pid, int64_t graph_id) const;
  // The graph_nodes rows behind node `node_id` of process `pid` (node ids are unique within a process).
  GraphNodeOrigin graph_node_origin(int64_t pid, int64_t node_id) const;

  // Flow between host and device: the API call that launched a GPU activity (correlation id) and back.
  std::optional<uint32_t> launching_api_call(EventRef gpu_event) const;
  std::vector<EventRef> launched_by(uint32_t api_row) const;
  // Where an event sits on the timeline (track, lane, position), for arrows and selection.
  struct Location {
    int track = -1, lane = -1;
    size_t index = 0;
  };
  std::optional<Location> locate(EventRef e) const;
  // The CPU sample on the same thread nearest to `t` within `window` ns (trace.samples row), or nullopt.
  std::optional<uint32_t> sample_near(int64_t pid, int64_t tid, int64_t t, int64_t window) const;
  // Frames of a stack, leaf first (trace.frames rows).
  std::vector<uint32_t> stack_frames(int64_t stack_id) const;
  std::string frame_name(uint32_t frame_row, bool full = false) const;
  // The sources that recorded data wait `row` (trace.data_waits row): several when others recorded the same wait.
  std::string wait_sources(uint32_t row) const;
  // Host events (ranges, API calls) on the same thread enclosing [start, end), outermost first.
  std::vector<EventRef> enclosing_ranges(int64_t pid, int64_t tid, int64_t start, int64_t end) const;

  // A thread as the call tree and flame graph name it: its timeline title ("python3 1111", "pt_data_worker
  // 1231", "Thread 1200"), with its process ("· Process 1229 pt_data_worker") when the trace has several;
  // "Thread TID" for a thread with no row.
  std::string thread_label(int64_t pid, int64_t tid) const;

  // Samples in [t0, t1) in time order (trace.samples rows).
  std::vector<uint32_t> samples_in(int64_t t0, int64_t t1) const;

 private:
  TimelineModel() = default;
  void build_steps_and_findings();
  // cross_rank.cpp: the cross-rank findings (first), the path and the delayed collectives; the RankLane tracks.
  void build_cross_rank(std::shared_ptr<const analyzer::MultiRankAnalysis> ranks);
  void add_rank_tracks();
  void mark_straggler_groups();
  // build_tracks() in the order it runs them.
  void build_tracks();
  struct EventsByTrack;
  EventsByTrack gather_events();
  void add_analysis_tracks();
  void add_gpu_tracks(EventsByTrack& events);
  void add_thread_tracks(EventsByTrack& events);
  void measure_extent();
  void index_flows();
  void index_names_and_stacks();

  // Groups a stream's graph rows into replays (replays_, replay_records_); returns their GraphReplay events.
  std::vector<EventRef> gather_replays(std::vector<EventRef>& graph_rows, bool& opens);

  // An API call's times, thread and correlation id, from the trace's rows or the columns.
  int64_t api_start(uint32_t row) const {
    return acols_ ? acols_->starts[row] : trace_->api_calls[row].start;
  }
  int64_t api_end(uint32_t row) const;                         // never before its start
  std::pair<int64_t, int64_t> api_thread(uint32_t row) const;  // (pid, tid)
  int64_t api_correlation(uint32_t row) const {
    return acols_ ? acols_->correlations[row] : trace_->api_calls[row].correlation;
  }
  void fill_api_call_columns(std::vector<store::ApiCall>& rows);  // moves them in; `rows` is emptied
  // A kernel's times, stream and launch, from the trace's rows or the columns.
  int64_t kernel_start(uint32_t row) const {
    return kcols_ ? kcols_->starts[row] : trace_->kernels[row].start;
  }
  int64_t kernel_end(uint32_t row) const;                          // never before its start
  std::pair<int64_t, int64_t> kernel_stream(uint32_t row) const;   // (device, stream)
  std::optional<uint32_t> api_call_of(int64_t correlation) const;  // the launch with this correlation id
  // timeline_store.cpp: the kernels into columns, from `rows` or streamed from the store.
  void fill_kernel_columns(const std::vector<store::Kernel>* rows);
  void index_api_calls();

  std::shared_ptr<const store::Trace> trace_;
  std::optional<KernelColumns> kcols_;
  std::optional<ApiCallColumns> acols_;
  std::shared_ptr<const store::StoreReader> store_;  // build_from_store's: kernel() reads rows from it
  std::unique_ptr<std::mutex> store_mutex_;  // StoreReader keeps the last block it read: one reader at a time
  std::shared_ptr<const analyzer::Analysis> analysis_;
  std::optional<CrossRank> cross_rank_;
  std::set<std::string> straggler_groups_;
  std::vector<Track> tracks_;
  std::vector<StepInfo> steps_;
  std::vector<FindingInfo> findings_;
  int64_t begin_ = 0, end_ = 1;
  size_t event_count_ = 0;
  // Flows as sorted arrays (16 bytes an entry, against ~90 for a hash map of vectors): 10M launches fit.
  std::vector<std::pair<int64_t, uint32_t>> api_by_correlation_;  // (correlation, api row), unique
  std::vector<std::pair<int64_t, EventRef>> gpu_by_correlation_;  // (correlation, GPU event) with a launch
  struct PairHash {
    size_t operator()(const std::pair<int64_t, int64_t>& p) const {
      return std::hash<int64_t>()(p.first * 0x9E3779B97F4A7C15LL ^ p.second);
    }
  };
  using PairMap = std::unordered_map<std::pair<int64_t, int64_t>, int, PairHash>;
  PairMap gpu_track_;     // (device, stream) → GpuStream track
  PairMap ranges_track_;  // (pid, tid) → CpuRanges track
  PairMap waits_track_;   // (pid, tid) → DataWaits track
  // One wait recorded by several sources (the program's NVTX range, stepscope.wait, the DataLoader hook) is drawn
  // once, as its outermost row: that row → every source, outermost first ("nvtx, api, dataloader").
  std::unordered_map<uint32_t, std::string> wait_sources_;
  PairMap samples_track_;  // (pid, tid) → CpuSamples track
  int steps_track_ = -1, findings_track_ = -1, path_track_ = -1;
  std::vector<uint32_t> samples_by_time_;        // trace.samples rows sorted by time
  std::unordered_map<int64_t, uint32_t> stack_row_;  // stack id → trace.stacks row
  std::unordered_map<int64_t, uint32_t> frame_row_;  // frame id → trace.frames row
  std::unordered_map<store::StringId, std::string> short_names_;  // kernel/range names whose display differs
  std::vector<GraphReplay> replays_;
  std::vector<EventRef> replay_records_;  // replays_[i]'s rows: [first, first + count)
  std::vector<std::pair<uint64_t, uint32_t>> replay_of_;  // (kind << 32 | row, replay), sorted
  std::string graph_records_ = "nodes";
  PairMap graph_row_;  // (pid, graph_id) → trace.graphs row
  PairMap node_row_;   // (pid, node_id) → trace.graph_nodes row
};

}  // namespace stepscope::gui
