// TimelineModel built from a store: kernels and API calls as columns, their full rows read back from the
// store on demand.
#include <algorithm>
#include <limits>
#include <map>

#include "stepscope/analyzer/load.h"
#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

namespace {

template <class Side>
auto find_row(const std::vector<std::pair<uint32_t, Side>>& side, uint32_t row) {
  auto it = std::lower_bound(side.begin(), side.end(), row,
                             [](const std::pair<uint32_t, Side>& p, uint32_t v) { return p.first < v; });
  return it != side.end() && it->first == row ? &it->second : nullptr;
}

template <class T>
size_t held(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// Rows of one key (a stream, a thread) come in runs: one map lookup a run, not a row.
class Slots {
 public:
  uint32_t of(const std::pair<int64_t, int64_t>& key, std::vector<std::pair<int64_t, int64_t>>& keys) {
    if (last_ == kNone || key != last_key_) {
      auto [it, added] = slot_.emplace(key, uint32_t(keys.size()));
      if (added) keys.push_back(key);
      last_key_ = key;
      last_ = it->second;
    }
    return last_;
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::map<std::pair<int64_t, int64_t>, uint32_t> slot_;
  std::pair<int64_t, int64_t> last_key_{};
  uint32_t last_ = kNone;
};

}  // namespace

int64_t TimedColumns::dur(uint32_t row) const {
  if (durs[row] != Lane::kLongDur) return int64_t(durs[row]);
  const int64_t* d = find_row(long_durs, row);
  return d ? *d : int64_t(Lane::kLongDur);
}

store::StringId TimedColumns::odd_name(uint32_t row) const {
  const store::StringId* id = find_row(odd_names, row);
  return id ? *id : store::StringId(kOddName);
}

void TimedColumns::reserve(size_t n) {
  starts.reserve(n);
  durs.reserve(n);
  names.reserve(n);
}

void TimedColumns::add(int64_t start, int64_t end, store::StringId name) {
  const uint32_t row = static_cast<uint32_t>(starts.size());
  const uint64_t d = end > start ? uint64_t(end) - uint64_t(start) : 0;
  if (d >= Lane::kLongDur) long_durs.emplace_back(row, int64_t(d));
  starts.push_back(start);
  durs.push_back(d >= Lane::kLongDur ? Lane::kLongDur : uint32_t(d));
  const bool odd = name < 0 || name >= int64_t(kOddName);
  if (odd) odd_names.emplace_back(row, name);
  names.push_back(odd ? kOddName : uint32_t(name));
}

size_t TimedColumns::bytes() const {
  return held(starts) + held(durs) + held(long_durs) + held(names) + held(odd_names);
}

const store::Kernel* KernelColumns::graph_row(uint32_t row) const {
  return find_row(graph_rows, row);
}

size_t KernelColumns::bytes() const {
  return TimedColumns::bytes() + held(streams) + held(stream_keys) + held(launches) + held(graph_rows);
}

size_t ApiCallColumns::bytes() const {
  return TimedColumns::bytes() + held(threads) + held(thread_keys) + held(correlations);
}

std::shared_ptr<const TimelineModel> TimelineModel::build_from_store(
    std::shared_ptr<const store::StoreReader> store, std::shared_ptr<store::Trace> trace,
    std::shared_ptr<const analyzer::Analysis> analysis) {
  std::shared_ptr<TimelineModel> m(new TimelineModel());
  m->store_ = std::move(store);
  m->store_mutex_ = std::make_unique<std::mutex>();
  const std::string& path = m->store_->path();
  const uint64_t kernels = m->store_->kernel_count(), calls = m->store_->api_call_count();
  if (kernels > std::numeric_limits<uint32_t>::max() || calls > std::numeric_limits<uint32_t>::max())
    throw store::StoreError(
        path, "more than 4,294,967,295 kernels or API calls: the timeline numbers them in 32 bits");
  if (trace && (trace->kernels.size() != kernels || trace->api_calls.size() != calls))
    throw store::StoreError(path, "the trace given holds " + std::to_string(trace->kernels.size()) +
                                      " kernels and " + std::to_string(trace->api_calls.size()) +
                                      " API calls, the store " + std::to_string(kernels) + " and " +
                                      std::to_string(calls) +
                                      ": not this store's trace, or it changed since");
  if (!trace) trace = std::make_shared<store::Trace>(analyzer::load_store(*m->store_, false));
  if (trace->api_calls.size() != calls)
    throw store::StoreError(path, "the store's API calls changed while read (" + std::to_string(calls) +
                                      " counted, " + std::to_string(trace->api_calls.size()) + " read)");
  m->trace_ = trace;
  m->analysis_ = std::move(analysis);
  m->fill_api_call_columns(trace->api_calls);
  m->index_api_calls();
  m->fill_kernel_columns(trace->kernels.empty() ? nullptr : &trace->kernels);
  std::vector<store::Kernel>().swap(trace->kernels);
  m->build_steps_and_findings();
  m->build_tracks();
  return m;
}

void TimelineModel::fill_api_call_columns(std::vector<store::ApiCall>& rows) {
  ApiCallColumns& c = acols_.emplace();
  c.reserve(rows.size());
  c.threads.reserve(rows.size());
  c.correlations.reserve(rows.size());
  Slots slots;
  for (const store::ApiCall& a : rows) {
    c.add(a.start, a.end, a.name);
    c.threads.push_back(slots.of({a.pid, a.tid}, c.thread_keys));
    c.correlations.push_back(a.correlation);
  }
  c.long_durs.shrink_to_fit();
  c.odd_names.shrink_to_fit();
  std::vector<store::ApiCall>().swap(rows);
}

// Every column reserved once at the count, which is known: grown by doubling while streaming, they would peak
// at up to twice their bytes.
void TimelineModel::fill_kernel_columns(const std::vector<store::Kernel>* rows) {
  KernelColumns& c = kcols_.emplace();
  const size_t n = rows ? rows->size() : size_t(store_->kernel_count());
  c.reserve(n);
  c.streams.reserve(n);
  const bool launches = !api_by_correlation_.empty();
  if (launches) c.launches.reserve(n);
  Slots slots;
  auto add = [&](const store::Kernel& k) {
    const uint32_t row = static_cast<uint32_t>(c.size());
    c.add(k.start, k.end, k.name);
    c.streams.push_back(slots.of({k.device, k.stream}, c.stream_keys));
    if (launches) {
      const std::optional<uint32_t> api = k.correlation ? api_call_of(k.correlation) : std::nullopt;
      c.launches.push_back(api ? *api + 1 : 0);
    }
    if (k.graph_id) c.graph_rows.emplace_back(row, k);
  };
  if (rows) {
    for (const store::Kernel& k : *rows) add(k);
  } else {
    store_->each_kernel(add);
  }
  if (c.size() != n)
    throw store::StoreError(store_->path(), "the store's kernels changed while read (" + std::to_string(n) +
                                                " counted, " + std::to_string(c.size()) + " read)");
  if (std::all_of(c.launches.begin(), c.launches.end(), [](uint32_t l) { return l == 0; }))
    std::vector<uint32_t>().swap(
        c.launches);  // calls with ids, but none launched a kernel: 4 bytes a kernel saved
  c.graph_rows.shrink_to_fit();
  c.long_durs.shrink_to_fit();
  c.odd_names.shrink_to_fit();
}

store::Kernel TimelineModel::kernel(uint32_t row) const {
  if (!kcols_) return trace_->kernels.at(row);
  if (row >= kcols_->size())
    throw store::StoreError(store_->path(), "no kernel row " + std::to_string(row) + " in the timeline");
  if (const store::Kernel* g = kcols_->graph_row(row)) return *g;
  std::lock_guard<std::mutex> lock(*store_mutex_);
  return store_->kernel_at(row);
}

store::ApiCall TimelineModel::api_call(uint32_t row) const {
  if (!acols_) return trace_->api_calls.at(row);
  if (row >= acols_->size())
    throw store::StoreError(store_->path(), "no API call row " + std::to_string(row) + " in the timeline");
  std::lock_guard<std::mutex> lock(*store_mutex_);
  return store_->api_call_at(row);
}

int64_t TimelineModel::kernel_end(uint32_t row) const {
  if (kcols_) return kcols_->end(row);
  const store::Kernel& k = trace_->kernels[row];
  return std::max(k.start, k.end);
}

std::pair<int64_t, int64_t> TimelineModel::kernel_stream(uint32_t row) const {
  if (kcols_) return kcols_->stream_keys[kcols_->streams[row]];
  const store::Kernel& k = trace_->kernels[row];
  return {k.device, k.stream};
}

int64_t TimelineModel::api_end(uint32_t row) const {
  if (acols_) return acols_->end(row);
  const store::ApiCall& a = trace_->api_calls[row];
  return std::max(a.start, a.end);
}

std::pair<int64_t, int64_t> TimelineModel::api_thread(uint32_t row) const {
  if (acols_) return acols_->thread_keys[acols_->threads[row]];
  const store::ApiCall& a = trace_->api_calls[row];
  return {a.pid, a.tid};
}

}  // namespace stepscope::gui
