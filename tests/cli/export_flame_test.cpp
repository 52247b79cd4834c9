// `stepscope export --format speedscope|svg` on a real recording (hot_loop under the built `stepscope
// record`), each parsed back and held against the folded export of the same store: frame names, per-thread
// counts, the leaf at the end of each stack, one rect per frame of the flame graph and a root as wide as all
// samples.
#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

test::CommandResult stepscope_cli(const std::string& args) {
  return test::run_shell(std::string(STEPSCOPE_CLI) + " " + args + " 2>&1");
}

struct FoldedLine {
  std::vector<std::string> frames;  // process, thread, outermost … innermost
  int64_t count = 0;
};

std::vector<FoldedLine> read_folded(const std::string& text) {
  std::vector<FoldedLine> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.rfind(' ');
    FoldedLine f;
    f.count = std::stoll(line.substr(space + 1));
    std::istringstream names(line.substr(0, space));
    for (std::string name; std::getline(names, name, ';');) f.frames.push_back(name);
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST_CASE("speedscope and SVG exports of a hot_loop recording agree with its folded stacks") {
  test::ScratchDir dir("cli_export_flame");
  const std::string db = dir.file("hot.db");
  const auto rec = stepscope_cli("record --no-gpu -o " + db + " -- " + HOT_LOOP + " --iterations 60000000");
  INFO(rec.output);
  REQUIRE(rec.status == 0);
  for (const char* format : {"folded", "collapsed", "speedscope", "svg"}) {
    const auto r =
        stepscope_cli(std::string("export ") + db + " --format " + format + " -o " + dir.file(format));
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  CHECK(test::slurp(dir.file("collapsed")) ==
        test::slurp(dir.file("folded")));  // the other name of one format
  const std::vector<FoldedLine> folded = read_folded(test::slurp(dir.file("folded")));
  REQUIRE(!folded.empty());
  std::map<std::string, int64_t> folded_per_thread;  // "process: thread" → samples
  std::set<std::string> folded_frames;
  int64_t total = 0;
  bool hot_function_leaf = false;
  for (const auto& l : folded) {
    folded_per_thread[l.frames[0] + ": " + l.frames[1]] += l.count;
    folded_frames.insert(l.frames.begin() + 2, l.frames.end());
    total += l.count;
    hot_function_leaf |= l.frames.back() == "hot_function(…)";
  }
  CHECK(hot_function_leaf);

  {  // speedscope: the shared frames, one sampled profile per thread, each stack root first
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.load(dir.file("speedscope"));
    CHECK(std::string_view(doc["$schema"]) == "https://www.speedscope.app/file-format-schema.json");
    std::vector<std::string> frames;
    for (simdjson::dom::element f : doc["shared"]["frames"].get_array())
      frames.emplace_back(std::string_view(f["name"]));
    CHECK(std::set<std::string>(frames.begin(), frames.end()) == folded_frames);
    std::map<std::string, int64_t> per_thread;
    std::map<std::vector<std::string>, int64_t>
        stacks;  // frames as folded has them (no process/thread) → weight
    for (simdjson::dom::element p : doc["profiles"].get_array()) {
      CHECK(std::string_view(p["type"]) == "sampled");
      const std::string name{std::string_view(p["name"])};
      simdjson::dom::array samples = p["samples"], weights = p["weights"];
      REQUIRE(samples.size() == weights.size());
      int64_t sum = 0;
      auto w = weights.begin();
      for (simdjson::dom::element s : samples) {
        std::vector<std::string> names;
        for (simdjson::dom::element i : s.get_array()) names.push_back(frames.at(size_t(int64_t(i))));
        const int64_t weight = int64_t(*w);
        ++w;
        sum += weight;
        stacks[names] += weight;
      }
      CHECK(int64_t(p["endValue"]) == sum);
      per_thread[name] += sum;
    }
    CHECK(per_thread == folded_per_thread);
    // Each folded line is one speedscope stack with the same frames in the same order: the leaf last.
    std::map<std::vector<std::string>, int64_t> expected;
    for (const auto& l : folded)
      expected[std::vector<std::string>(l.frames.begin() + 2, l.frames.end())] += l.count;
    CHECK(stacks == expected);
  }

  {  // svg: well-formed XML, one rect per frame of the folded tree, the root as wide as all samples
    // Distinct prefixes of the folded lines are the flame graph's frames (plus the root "all"), those at
    // least a pixel wide: 1180 px for all samples.
    std::map<std::vector<std::string>, int64_t> prefix_samples;
    for (const auto& l : folded)
      for (size_t n = 1; n <= l.frames.size(); ++n)
        prefix_samples[{l.frames.begin(), l.frames.begin() + long(n)}] += l.count;
    std::set<std::vector<std::string>> prefixes;
    size_t depth = 0;
    for (const auto& [prefix, samples] : prefix_samples)
      if (double(samples) * 1180.0 / double(total) >= 1.0) {
        prefixes.insert(prefix);
        depth = std::max(depth, prefix.size());
      }
    INFO(prefixes.size() << " of " << prefix_samples.size() << " frames a pixel wide or more");
    // Python's XML parser: the frames (a <g> each: <title>, <rect>), the root's title, whether the root is
    // the lowest row, the rows, and whether every width is the samples its title gives at one scale.
    const std::string script =
        "import re, sys, xml.etree.ElementTree as ET\n"
        "ns = '{http://www.w3.org/2000/svg}'\n"
        "frames = [(g.find(ns + 'title').text, g.find(ns + 'rect')) for g in "
        "ET.parse(sys.argv[1]).getroot().iter(ns + 'g')]\n"
        "root = [f for f in frames if f[0].startswith('all (')]\n"
        "samples = lambda title: int(re.search(r'\\((\\d+) samples, [0-9.]+%\\)$', title).group(1))\n"
        "scale = float(root[0][1].get('width')) / samples(root[0][0])\n"
        "print(len(frames)); print(len(root)); print(root[0][0])\n"
        "print(float(root[0][1].get('y')) == max(float(r.get('y')) for _, r in frames))\n"
        "print(len(set(r.get('y') for _, r in frames)))\n"
        "print(all(abs(float(r.get('width')) - scale * samples(t)) < 0.02 for t, r in frames))\n";
    std::ofstream(dir.file("check_svg.py")) << script;
    const auto r = test::run_shell("python3 " + dir.file("check_svg.py") + " " + dir.file("svg") + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    std::istringstream out(r.output);
    std::string rects, roots, root, root_at_bottom, rows, proportional;
    for (std::string* line : {&rects, &roots, &root, &root_at_bottom, &rows, &proportional})
      std::getline(out, *line);
    CHECK(std::stoul(rects) == prefixes.size() + 1);
    CHECK(roots == "1");
    CHECK(root == "all (" + std::to_string(total) + " samples, 100.00%)");
    CHECK(root_at_bottom == "True");  // flamegraph.pl's default: the root at the bottom, leaves on top
    CHECK(proportional == "True");
    CHECK(std::stoul(rows) == depth + 1);
    // What was left out is said, counted.
    const size_t left_out = prefix_samples.size() - prefixes.size();
    const std::string said = "; " + std::to_string(left_out) + " of " +
                             std::to_string(prefix_samples.size() + 1) +
                             " frames, under a pixel wide, left out (--format speedscope keeps them)";
    CHECK((test::slurp(dir.file("svg")).find(said) != std::string::npos) == (left_out > 0));
  }
}

TEST_CASE("export refuses an unknown format and a trace without CPU samples in one line, exit 2") {
  test::ScratchDir dir("cli_export_flame_bad");
  const auto u = stepscope_cli("export x.db --format pprof -o " + dir.file("p"));
  CHECK(u.status == 2);
  CHECK(u.output ==
        "stepscope: pprof: unknown export format (supported: chrome, folded or collapsed, speedscope, svg, "
        "sqlite)\n");
  if (!test::have_traces()) STEPSCOPE_SKIP("no shared traces");
  const std::string k = test::trace_path("hta/cuda_event_sync.json.gz");
  for (const char* format : {"speedscope", "svg"}) {
    const auto r = stepscope_cli("export " + k + " --format " + format + " -o " + dir.file("out"));
    CHECK(r.status == 2);
    CHECK(r.output == "stepscope: " + k +
                          ": no CPU samples to fold (a Kineto trace has none; an Nsight Systems export has "
                          "them when nsys sampled the CPU)\n");
  }
}

TEST_CASE(
    "export --format sqlite: a recording's packed store as rows that plain SQL reads, equal to stepscope's") {
  test::ScratchDir dir("cli_export_sqlite");
  const std::string db = dir.file("hot.db"), rows = dir.file("rows.db");
  const auto rec = stepscope_cli("record --no-gpu -o " + db + " -- " + HOT_LOOP + " --iterations 150000000");
  INFO(rec.output);
  REQUIRE(rec.status == 0);
  const auto r = stepscope_cli("export " + db + " --format sqlite -o " + rows);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const store::Trace packed = store::StoreReader(db).load();
  REQUIRE(store::StoreReader(db).schema_version() ==
          store::kSchemaVersion);  // the merge packs what the collector wrote as rows
  REQUIRE(packed.samples.size() > 50);
  CHECK(r.output == rows + ": a store of rows (schema 4): 0 kernels, 0 API calls, " +
                        std::to_string(packed.samples.size()) + " CPU samples, " +
                        std::to_string(packed.stacks.size()) + " stack nodes\n");
  // Plain SQL over the export: every sample and stack node, each as stepscope read it from the packed store.
  sqlite3* sql = nullptr;
  REQUIRE(sqlite3_open_v2(rows.c_str(), &sql, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  auto each = [&](const char* query, auto&& fn) {
    sqlite3_stmt* s = nullptr;
    REQUIRE(sqlite3_prepare_v2(sql, query, -1, &s, nullptr) == SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) fn(s);
    sqlite3_finalize(s);
  };
  int version = 0;
  each("PRAGMA user_version", [&](sqlite3_stmt* s) { version = sqlite3_column_int(s, 0); });
  CHECK(version == 4);
  size_t i = 0, mismatched = 0;
  each("SELECT time_ns, pid, tid, stack, on_cpu, periods FROM samples ORDER BY rowid", [&](sqlite3_stmt* s) {
    const store::Sample& p = packed.samples.at(i++);
    mismatched += !(sqlite3_column_int64(s, 0) == p.time && sqlite3_column_int64(s, 1) == p.pid &&
                    sqlite3_column_int64(s, 2) == p.tid && sqlite3_column_int64(s, 3) == p.stack &&
                    (sqlite3_column_int64(s, 4) != 0) == p.on_cpu && sqlite3_column_int64(s, 5) == p.periods);
  });
  CHECK(i == packed.samples.size());
  CHECK(mismatched == 0);
  i = mismatched = 0;
  each("SELECT id, parent, frame FROM stacks ORDER BY id", [&](sqlite3_stmt* s) {
    const store::Stack& p = packed.stacks.at(i++);
    mismatched += !(sqlite3_column_int64(s, 0) == p.id && sqlite3_column_int64(s, 1) == p.parent &&
                    sqlite3_column_int64(s, 2) == p.frame);
  });
  CHECK(i == packed.stacks.size());
  CHECK(mismatched == 0);
  // The views of the rows' layout are there: names joined in.
  int64_t named = 0;
  each("SELECT count(*) FROM frames_v f JOIN stacks s ON s.frame = f.id WHERE f.symbol != ''",
       [&](sqlite3_stmt* s) { named = sqlite3_column_int64(s, 0); });
  CHECK(named > 0);
  sqlite3_close(sql);
  // Into a folder that does not exist: one line, exit 2, nothing written.
  const auto bad = stepscope_cli("export " + db + " --format sqlite -o " + dir.file("no/such/rows.db"));
  CHECK(bad.status == 2);
  CHECK(bad.output.rfind("stepscope: " + dir.file("no/such/rows.db") + ": no such folder", 0) == 0);
}
