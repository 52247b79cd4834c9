#include "flight/flight_window.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/collector_internal.h"
#include "stepscope/store/store.h"

namespace stepscope::collector::flight {
namespace {

template <class V>
void drop_ended_before(V& rows, int64_t cutoff) {
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [cutoff](const auto& r) { return r.end != 0 && r.end < cutoff; }),
             rows.end());
}

template <class V>
int64_t bytes_of(const V& v) {
  return int64_t(v.capacity() * sizeof(typename V::value_type));
}

}  // namespace

void FlightWindow::prune(int64_t cutoff_ns) {
  auto& s = rows_.samples;
  s.erase(
      std::remove_if(s.begin(), s.end(), [cutoff_ns](const store::Sample& r) { return r.time < cutoff_ns; }),
      s.end());
  drop_ended_before(rows_.kernels, cutoff_ns);
  drop_ended_before(rows_.memcpys, cutoff_ns);
  drop_ended_before(rows_.memsets, cutoff_ns);
  drop_ended_before(rows_.syncs, cutoff_ns);
  drop_ended_before(rows_.api_calls, cutoff_ns);
  drop_ended_before(rows_.ranges, cutoff_ns);
  drop_ended_before(rows_.data_waits, cutoff_ns);
  drop_ended_before(rows_.steps, cutoff_ns);
  drop_ended_before(rows_.gpu_windows, cutoff_ns);
}

int64_t FlightWindow::timed_rows() const {
  const auto& t = rows_;
  return int64_t(t.samples.size() + t.kernels.size() + t.memcpys.size() + t.memsets.size() + t.syncs.size() +
                 t.api_calls.size() + t.ranges.size() + t.data_waits.size() + t.steps.size() +
                 t.gpu_windows.size());
}

int64_t FlightWindow::memory_bytes() const {
  const auto& t = rows_;
  int64_t b = bytes_of(t.processes) + bytes_of(t.threads) + bytes_of(t.devices) + bytes_of(t.kernels) +
              bytes_of(t.memcpys) + bytes_of(t.memsets) + bytes_of(t.syncs) + bytes_of(t.api_calls) +
              bytes_of(t.ranges) + bytes_of(t.frames) + bytes_of(t.stacks) + bytes_of(t.samples) +
              bytes_of(t.data_waits) + bytes_of(t.steps) + bytes_of(t.modules) + bytes_of(t.gpu_windows);
  for (size_t i = 0; i < t.strings.size(); ++i)
    b += int64_t(t.strings.get(store::StringId(i)).capacity()) + 32;
  return b;
}

std::string FlightWindow::write_part(const std::string& dir, int32_t pid,
                                     const std::map<std::string, std::string>& meta) const {
  char name[96];
  std::snprintf(name, sizeof name, "/%d-%lld.db", int(pid), (long long)now_ns());
  const std::string path = dir + name;
  const std::string tmp =
      dir + "/." + (name + 1) + ".tmp";  // no ".db": the launcher never takes it for a part
  {
    store::WriterOptions opt;
    opt.wal = false;
    opt.durable = false;  // renamed into place only when complete
    opt.batch_rows = size_t(1) << 30;
    opt.packed = false;  // a part, packed once by the launcher's merge: no compression inside the target
    store::StoreWriter w(tmp, opt);
    w.append(rows_);
    for (const auto& [k, v] : meta) w.set_meta(k, v);
    w.close();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw store::StoreError(path, "cannot rename the flight part into place");
  }
  return path;
}

}  // namespace stepscope::collector::flight
