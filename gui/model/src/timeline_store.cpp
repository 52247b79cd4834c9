// TimelineModel built from a store: kernels as columns, their full rows read back from the store on demand.
#include <algorithm>
#include <limits>
#include <map>

#include "stepscope/analyzer/load.h"
#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

int64_t KernelColumns::dur(uint32_t row) const {
  if (durs[row] != Lane::kLongDur) return int64_t(durs[row]);
  auto it = std::lower_bound(long_durs.begin(), long_durs.end(), row,
                             [](const std::pair<uint32_t, int64_t>& p, uint32_t v) { return p.first < v; });
  return it != long_durs.end() && it->first == row ? it->second : int64_t(Lane::kLongDur);
}

store::StringId KernelColumns::odd_name(uint32_t row) const {
  auto it =
      std::lower_bound(odd_names.begin(), odd_names.end(), row,
                       [](const std::pair<uint32_t, store::StringId>& p, uint32_t v) { return p.first < v; });
  return it != odd_names.end() && it->first == row ? it->second : store::StringId(kOddName);
}

const store::Kernel* KernelColumns::graph_row(uint32_t row) const {
  auto it =
      std::lower_bound(graph_rows.begin(), graph_rows.end(), row,
                       [](const std::pair<uint32_t, store::Kernel>& p, uint32_t v) { return p.first < v; });
  return it != graph_rows.end() && it->first == row ? &it->second : nullptr;
}

size_t KernelColumns::bytes() const {
  return starts.capacity() * sizeof(starts[0]) + durs.capacity() * sizeof(durs[0]) +
         long_durs.capacity() * sizeof(long_durs[0]) + names.capacity() * sizeof(names[0]) +
         odd_names.capacity() * sizeof(odd_names[0]) + streams.capacity() * sizeof(streams[0]) +
         stream_keys.capacity() * sizeof(stream_keys[0]) + launches.capacity() * sizeof(launches[0]) +
         graph_rows.capacity() * sizeof(graph_rows[0]);
}

std::shared_ptr<const TimelineModel> TimelineModel::build_from_store(
    std::shared_ptr<const store::StoreReader> store, std::shared_ptr<store::Trace> trace,
    std::shared_ptr<const analyzer::Analysis> analysis) {
  std::shared_ptr<TimelineModel> m(new TimelineModel());
  m->store_ = std::move(store);
  m->store_mutex_ = std::make_unique<std::mutex>();
  const uint64_t n = m->store_->kernel_count();
  if (n > std::numeric_limits<uint32_t>::max())
    throw store::StoreError(m->store_->path(),
                            "more than 4,294,967,295 kernels: the timeline numbers them in 32 bits");
  if (trace && trace->kernels.size() != n)
    throw store::StoreError(m->store_->path(), "the trace given holds " +
                                                   std::to_string(trace->kernels.size()) +
                                                   " kernels, the store " + std::to_string(n) +
                                                   ": not this store's trace, or it changed since");
  if (!trace) trace = std::make_shared<store::Trace>(analyzer::load_store(*m->store_, false));
  m->trace_ = trace;
  m->analysis_ = std::move(analysis);
  m->index_api_calls();
  m->fill_kernel_columns(trace->kernels.empty() ? nullptr : &trace->kernels);
  std::vector<store::Kernel>().swap(trace->kernels);
  m->build_steps_and_findings();
  m->build_tracks();
  return m;
}

// Two passes when streaming would grow every column by doubling (up to twice the bytes at the peak): the
// count is known, so each column is reserved once at its size.
void TimelineModel::fill_kernel_columns(const std::vector<store::Kernel>* rows) {
  KernelColumns& c = kcols_.emplace();
  const size_t n = rows ? rows->size() : size_t(store_->kernel_count());
  c.starts.reserve(n);
  c.durs.reserve(n);
  c.names.reserve(n);
  c.streams.reserve(n);
  const bool launches = !api_by_correlation_.empty();
  if (launches) c.launches.reserve(n);
  std::map<std::pair<int64_t, int64_t>, uint32_t> slot;
  std::pair<int64_t, int64_t> last_key{};
  uint32_t last_slot = std::numeric_limits<uint32_t>::max();
  auto add = [&](const store::Kernel& k) {
    const uint32_t row = static_cast<uint32_t>(c.starts.size());
    const uint64_t d = k.end > k.start ? uint64_t(k.end) - uint64_t(k.start) : 0;
    if (d >= Lane::kLongDur) c.long_durs.emplace_back(row, int64_t(d));
    c.starts.push_back(k.start);
    c.durs.push_back(d >= Lane::kLongDur ? Lane::kLongDur : uint32_t(d));
    const bool odd = k.name < 0 || k.name >= int64_t(KernelColumns::kOddName);
    if (odd) c.odd_names.emplace_back(row, k.name);
    c.names.push_back(odd ? KernelColumns::kOddName : uint32_t(k.name));
    const std::pair<int64_t, int64_t> key{k.device, k.stream};
    if (last_slot == std::numeric_limits<uint32_t>::max() || key != last_key) {
      auto [it, added] = slot.emplace(key, uint32_t(c.stream_keys.size()));
      if (added) c.stream_keys.push_back(key);
      last_key = key;
      last_slot = it->second;
    }
    c.streams.push_back(last_slot);
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

int64_t TimelineModel::kernel_end(uint32_t row) const {
  // Unsigned: a kernel from int64's least to its greatest time has a duration past int64 (stored wrapped).
  if (kcols_) return int64_t(uint64_t(kcols_->starts[row]) + uint64_t(kcols_->dur(row)));
  const store::Kernel& k = trace_->kernels[row];
  return std::max(k.start, k.end);
}

std::pair<int64_t, int64_t> TimelineModel::kernel_stream(uint32_t row) const {
  if (kcols_) return kcols_->stream_keys[kcols_->streams[row]];
  const store::Kernel& k = trace_->kernels[row];
  return {k.device, k.stream};
}

}  // namespace stepscope::gui
