// The CPU samples in speedscope's file format (https://www.speedscope.app/file-format-schema.json), as py-spy
// writes it: one shared frames table, one "sampled" profile per thread.
#include <string>
#include <vector>

#include "export/sample_stacks.h"
#include "stepscope/analyzer/export.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

using namespace stepscope::store;

std::string to_speedscope_json(const Trace& t, const std::string& name) {
  const SampleStacks st = sample_stacks(t);
  std::string out;
  JsonWriter w(out);
  w.begin_object().kv("$schema", "https://www.speedscope.app/file-format-schema.json");
  w.kv("name", name);
  w.kv("exporter", "stepscope");
  w.key("shared").begin_object().key("frames").begin_array();
  for (const auto& name : st.frames) w.begin_object().kv("name", name).end_object();
  w.end_array().end_object();
  size_t busiest = 0;  // speedscope opens on the thread with the most samples
  for (size_t i = 0; i < st.threads.size(); ++i)
    if (st.threads[i].total > st.threads[busiest].total) busiest = i;
  w.kv("activeProfileIndex", int64_t(busiest));
  w.key("profiles").begin_array();
  for (const auto& th : st.threads) {
    // Time order is kept (speedscope's "Time Order" view); a run of one stack is one sample of their summed
    // weight.
    std::vector<SampleStacks::Weighted> runs;
    for (const auto& s : th.samples) {
      if (!runs.empty() && runs.back().stack == s.stack)
        runs.back().weight += s.weight;
      else
        runs.push_back(s);
    }
    w.begin_object().kv("type", "sampled").kv("name", th.process + ": " + th.thread).kv("unit", "none");
    w.kv("startValue", int64_t(0)).kv("endValue", th.total);
    w.key("samples").begin_array();
    for (const auto& r : runs) {
      w.begin_array();
      for (int32_t f : st.stacks[r.stack]) w.value(int64_t(f));
      w.end_array();
    }
    w.end_array().key("weights").begin_array();
    for (const auto& r : runs) w.value(r.weight);
    w.end_array().end_object();
  }
  w.end_array().end_object();
  out += '\n';
  return out;
}

void export_speedscope(const Trace& t, const std::string& path, const std::string& name) {
  store::write_file_atomically(path, to_speedscope_json(t, name));
}

}  // namespace stepscope::analyzer
