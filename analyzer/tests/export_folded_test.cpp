// `stepscope export --format folded`: the CPU samples of a real H100 recording as collapsed stacks — every
// sample counted once, under the stack the store holds — and the format's escapes on a small trace.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>

#include "stepscope/analyzer/export.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

TEST_CASE("folded stacks of the H100 sync_stall recording: every sample once, under its own stack") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("export_folded");
  const std::string db = test::decompressed_recording("h100-2026-11-22/sync_stall.db.xz", dir);
  REQUIRE(!db.empty());
  const store::Trace t = store::StoreReader(db).load();
  REQUIRE(t.samples.size() == 500);
  const std::string folded = analyzer::to_folded_stacks(t);
  std::istringstream in(folded);
  std::string line, previous;
  int64_t total = 0, main_leaf = 0;
  while (std::getline(in, line)) {
    CHECK(previous < line);  // sorted, each stack once
    previous = line;
    CHECK(line.rfind("sync_stall (743);sync_stall (743);", 0) == 0);
    const auto space = line.rfind(' ');
    const int64_t n = std::stoll(line.substr(space + 1));
    CHECK(n > 0);
    total += n;
    if (line.substr(0, space).size() >= 5 && line.compare(space - 5, 5, ";main") == 0) main_leaf += n;
  }
  CHECK(total == 500);
  // Independently: samples whose innermost frame is main itself (the host's own loop, not a call below it).
  std::map<int64_t, const store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::map<int64_t, int64_t> frame_of;
  for (const auto& s : t.stacks) frame_of[s.id] = s.frame;
  int64_t in_main = 0;
  for (const auto& s : t.samples)
    if (s.stack && t.str(frames[frame_of[s.stack]]->symbol) == "main") ++in_main;
  CHECK(in_main > 0);
  CHECK(main_leaf == in_main);

  analyzer::export_folded_stacks(t, dir.file("out.folded"));
  CHECK(test::slurp(dir.file("out.folded")) == folded);
}

TEST_CASE("folded stacks: off-CPU samples end in [off CPU], separators in names are escaped") {
  store::Trace t;
  t.processes.push_back({7, t.intern("py;thon"), 1});
  t.threads.push_back({7, 8, t.intern("main"), false});
  store::Frame f;
  f.id = 1;
  f.symbol = t.intern("step;inner");
  f.kind = store::FrameKind::Native;
  f.module = t.intern("/lib/libx.so");
  t.frames.push_back(f);
  t.stacks.push_back({1, 0, 1});
  t.samples.push_back({100, 7, 8, 1, true});
  t.samples.push_back({200, 7, 8, 1, false});
  t.samples.push_back({300, 7, 8, 1, true});
  t.samples.push_back({400, 7, 8, 0, true});
  CHECK(analyzer::to_folded_stacks(t) ==
        "py:thon (7);main (8) 1\n"
        "py:thon (7);main (8);step:inner 2\n"
        "py:thon (7);main (8);step:inner;[off CPU] 1\n");
}
