// The speedscope and SVG exports on a small trace: the collector's hook frames left out as in the folded
// export, off-CPU samples, runs of one stack merged in time order, names escaped for JSON and XML.
#include <catch2/catch.hpp>
#include <string>

#include "stepscope/analyzer/export.h"
#include "stepscope/store/records.h"

using namespace stepscope;

namespace {

// python3 train.py: train (train.py:3) → a hook trampoline → step (model.py:3), with a C++ leaf named with a
// quote and template brackets.
store::Trace small_trace() {
  store::Trace t;
  t.processes.push_back({7, t.intern("python3"), 1});
  t.threads.push_back({7, 8, t.intern("MainThread"), false});
  auto frame = [&](int64_t id, const char* symbol, const char* file, store::FrameKind kind) {
    store::Frame f;
    f.id = id;
    f.symbol = t.intern(symbol);
    f.file = t.intern(file);
    f.line = 3;
    f.kind = kind;
    t.frames.push_back(f);
  };
  frame(1, "train", "/w/train.py", store::FrameKind::Python);
  frame(2, "_step_trampoline", "<stepscope-collector>/hooks.py", store::FrameKind::Python);
  frame(3, "step", "/w/model.py", store::FrameKind::Python);
  frame(4, "a<\"b\">::c", "", store::FrameKind::Native);
  t.stacks = {{1, 0, 1}, {2, 1, 2}, {3, 2, 3}, {4, 3, 4}};
  t.samples = {{100, 7, 8, 3, true},
               {200, 7, 8, 3, true},
               {300, 7, 8, 4, true},
               {400, 7, 8, 3, false},
               {500, 7, 8, 3, true}};
  return t;
}

}  // namespace

TEST_CASE("speedscope: shared frames without the hook, runs merged in time order, off CPU last") {
  const std::string json = analyzer::to_speedscope_json(small_trace(), "run \"1\"");
  CHECK(
      json ==
      "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"name\":\"run \\\"1\\\"\","
      "\"exporter\":\"stepscope\",\"shared\":{\"frames\":[{\"name\":\"step (model.py:3)\"},"
      "{\"name\":\"train (train.py:3)\"},{\"name\":\"a<…>::c\"},{\"name\":\"[off CPU]\"}]},"
      "\"activeProfileIndex\":0,\"profiles\":[{\"type\":\"sampled\",\"name\":\"python3 (7): MainThread (8)\","
      "\"unit\":\"none\",\"startValue\":0,\"endValue\":5,\"samples\":[[1,0],[1,0,2],[1,0,3],[1,0]],"
      "\"weights\":[2,1,1,1]}]}\n");
  CHECK(analyzer::to_folded_stacks(small_trace()) ==
        "python3 (7);MainThread (8);train (train.py:3);step (model.py:3) 3\n"
        "python3 (7);MainThread (8);train (train.py:3);step (model.py:3);[off CPU] 1\n"
        "python3 (7);MainThread (8);train (train.py:3);step (model.py:3);a<…>::c 1\n");
}

TEST_CASE("svg: one frame per node of the folded tree, names escaped, the root at the bottom") {
  const std::string svg = analyzer::to_flame_graph_svg(small_trace(), "a & b");
  size_t groups = 0;
  for (size_t at = svg.find("<g>"); at != std::string::npos; at = svg.find("<g>", at + 1)) ++groups;
  CHECK(groups == 7);  // all, process, thread, train, step, [off CPU], a<…>::c
  CHECK(svg.find("<title>all (5 samples, 100.00%)</title><rect x=\"10.00\" y=\"") != std::string::npos);
  CHECK(svg.find("<title>a&lt;…&gt;::c (1 samples, 20.00%)</title>") != std::string::npos);
  CHECK(svg.find(">a & b<") == std::string::npos);
  CHECK(svg.find(">a &amp; b<") != std::string::npos);
  CHECK(svg.find("hooks.py") == std::string::npos);
  CHECK(svg.find("<script") == std::string::npos);
  // Rows: the root lowest (y largest), the leaf highest.
  auto y_of = [&](const std::string& title) {
    const size_t at = svg.find("<title>" + title);
    const size_t y = svg.find("y=\"", at) + 3;
    return std::stod(svg.substr(y, svg.find('"', y) - y));
  };
  CHECK(y_of("all") > y_of("python3 (7)"));
  CHECK(y_of("step (model.py:3)") > y_of("a&lt;"));
}

// The collector's own start-up (hooks_bootstrap.py) imports its package through importlib: those importlib frames
// and whatever they call are the profiler's, so the sample is "[stepscope hook]" under the frames that called the
// start-up; a trampoline keeps the program's function it calls (above).
TEST_CASE("folded: what the collector's start-up calls is the profiler's, not the program's importlib") {
  store::Trace t = small_trace();
  auto frame = [&](int64_t id, const char* symbol, const char* file, store::FrameKind kind) {
    store::Frame f;
    f.id = id;
    f.symbol = t.intern(symbol);
    f.file = t.intern(file);
    f.line = 9;
    f.kind = kind;
    t.frames.push_back(f);
  };
  frame(5, "<module>", "<stepscope-collector>/hooks_bootstrap.py", store::FrameKind::Python);
  frame(6, "_find_and_load", "<frozen importlib._bootstrap>", store::FrameKind::Python);
  frame(7, "PyImport_ImportModuleLevelObject", "", store::FrameKind::Native);
  frame(8, "<module>", "<stepscope-collector>/stepscope/_autohook.py", store::FrameKind::Python);
  t.stacks.push_back({5, 1, 5});  // train → start-up (a pending call run at a bytecode boundary of train)
  t.stacks.push_back({6, 5, 6});
  t.stacks.push_back({7, 6, 7});
  t.stacks.push_back({8, 7, 8});
  t.samples = {{100, 7, 8, 7, true}, {200, 7, 8, 8, true}, {300, 7, 8, 3, true}};
  CHECK(analyzer::to_folded_stacks(t) ==
        "python3 (7);MainThread (8);train (train.py:3);[stepscope hook] 2\n"
        "python3 (7);MainThread (8);train (train.py:3);step (model.py:3) 1\n");
}

TEST_CASE("svg: frames under a pixel wide are left out with what they called, and the subtitle counts them") {
  // 2,000 samples: one is 0.59 px of the 1180, so its leaf (a<…>::c) is left out; 2 samples (1.18 px) are
  // kept.
  store::Trace t = small_trace();
  t.samples.clear();
  for (int64_t i = 0; i < 1997; ++i) t.samples.push_back({100 + i, 7, 8, 3, true});
  t.samples.push_back({3000, 7, 8, 4, true});
  t.samples.push_back({3001, 7, 8, 3, false});
  t.samples.push_back({3002, 7, 8, 3, false});
  const std::string svg = analyzer::to_flame_graph_svg(t, "t");
  CHECK(svg.find("a&lt;…&gt;::c") == std::string::npos);
  CHECK(svg.find("<title>[off CPU] (2 samples, 0.10%)</title>") != std::string::npos);
  // all, process, thread, train, step, [off CPU], a<…>::c: 7 frames, 1 left out.
  CHECK(svg.find(
            "hover a frame for its count; 1 of 7 frames, under a pixel wide, left out (--format speedscope "
            "keeps them)</text>") != std::string::npos);
  // Nothing left out: nothing said.
  CHECK(analyzer::to_flame_graph_svg(small_trace(), "t").find("left out") == std::string::npos);
}
