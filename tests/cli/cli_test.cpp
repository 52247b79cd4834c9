// The `stepscope` command as a user runs it: a real child process, its output and exit code.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "stepscope/store/store.h"
#include "test_support.h"

namespace {

// The widest line of `text` in columns (UTF-8: a column a character).
size_t widest(const std::string& text) {
  size_t most = 0, cols = 0;
  for (unsigned char c : text) {
    if (c == '\n')
      most = std::max(most, cols), cols = 0;
    else
      cols += (c & 0xC0) != 0x80;
  }
  return std::max(most, cols);
}

// stdout and stderr together, and the exit code.
stepscope::test::CommandResult run(const std::string& args) {
  return stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " " + args + " 2>&1");
}
}  // namespace

TEST_CASE("the version flag prints the version") {
  auto r = run("--version");
  CHECK(r.status == 0);
  CHECK(r.output.rfind("stepscope 0.", 0) == 0);
}

TEST_CASE("info prints counts, span, devices and metadata of a store") {
  using namespace stepscope::store;
  stepscope::test::ScratchDir dir("cli_info");
  Trace t;
  t.meta["source_format"] = "test";
  t.devices.push_back({0, t.intern("NVIDIA A100-SXM4-80GB"), 8, 0, 108, 80LL << 30, t.intern("nvidia")});
  t.processes.push_back({4242, t.intern("python3"), 1});
  for (int i = 0; i < 3; ++i) t.kernels.push_back(Kernel{.start = 1'000'000'000LL * i, .end = 1'000'000'000LL * i + 500, .name = t.intern("k")});
  write_store_atomically(t, dir.file("run.db"));

  auto r = run("info " + dir.file("run.db"));
  CHECK(r.status == 0);
  CHECK(r.output.find("kernels") != std::string::npos);
  CHECK(r.output.find("time span: 2.000001 s") != std::string::npos);
  CHECK(r.output.find("NVIDIA A100-SXM4-80GB (cc 8.0, 108 SMs, 80.0 GiB)") != std::string::npos);
  CHECK(r.output.find("4242 python3") != std::string::npos);
  CHECK(r.output.find("source_format = test") != std::string::npos);

  auto j = run("info --json " + dir.file("run.db"));
  CHECK(j.status == 0);
  CHECK(j.output.find("\"kernels\":3") != std::string::npos);
  CHECK(j.output.find("\"time_span_ns\":[0,2000000500]") != std::string::npos);
  CHECK(j.output.find("\"sm_count\":108") != std::string::npos);
}

TEST_CASE("info reports rows that break the thread invariant, and none in a store that keeps it") {
  using namespace stepscope::store;
  stepscope::test::ScratchDir dir("cli_info_invariant");
  Trace t;
  t.processes.push_back({100, t.intern("trainer"), 1});
  t.threads.push_back({100, 101, t.intern("main")});
  t.samples.push_back({10, 100, 101, 0, true});
  t.api_calls.push_back({20, 30, 100, 101, ApiKind::Runtime, t.intern("cudaLaunchKernel"), 7, 0});
  t.syncs.push_back({40, 50, 100, 101, SyncType::Context, 0, -1, 8});
  write_store_atomically(t, dir.file("good.db"));
  auto good = run("info " + dir.file("good.db"));
  CHECK(good.status == 0);
  CHECK(good.output.find("invariant: every pid and thread in processes / threads: ok") != std::string::npos);

  // What a v1 recording on the H100 held: CUPTI's pthread_t in api_calls.tid, 0 in syncs.tid.
  t.api_calls[0].tid = 2264182784;
  t.syncs[0].tid = 0;
  write_store_atomically(t, dir.file("bad.db"));
  auto bad = run("info " + dir.file("bad.db"));
  CHECK(bad.status == 0);
  CHECK(bad.output.find("api_calls: 1 rows, (pid, tid) not in threads (e.g. pid 100 tid 2264182784)") !=
        std::string::npos);
  CHECK(bad.output.find("syncs: 1 rows, tid 0 (e.g. pid 100 tid 0)") != std::string::npos);
  auto j = run("info --json " + dir.file("bad.db"));
  CHECK(j.output.find("{\"table\":\"api_calls\",\"problem\":\"(pid, tid) not in threads\",\"rows\":1") !=
        std::string::npos);
}

TEST_CASE("info reports the invariant breaks of a real v1 recording made on an H100") {
  const std::string xz = stepscope::test::traces_dir() + "/../recordings/h100-2026-11-22/sync_stall.db.xz";
  if (!std::ifstream(xz)) STEPSCOPE_SKIP(("H100 recordings not found at " + xz).c_str());
  stepscope::test::ScratchDir dir("cli_info_h100");
  REQUIRE(stepscope::test::run_shell("xz -dc " + stepscope::test::shell_quote(xz) + " > " +
                                     stepscope::test::shell_quote(dir.file("sync_stall.db")))
              .status == 0);
  auto r = run("info " + dir.file("sync_stall.db"));
  CHECK(r.status == 0);
  CHECK(r.output.find("schema v1") != std::string::npos);
  // 2545 runtime/driver rows on CUPTI's thread id, not the trainer's OS thread 743; 202 syncs without a thread.
  CHECK(r.output.find("api_calls: 2545 rows, (pid, tid) not in threads (e.g. pid 743 tid ") != std::string::npos);
  CHECK(r.output.find("syncs: 202 rows, tid 0") != std::string::npos);
}

TEST_CASE("info on bad input: one line naming the file, exit code 2") {
  stepscope::test::ScratchDir dir("cli_bad");
  std::ofstream(dir.file("notes.txt")) << "not a store\n";
  auto r = run("info " + dir.file("notes.txt"));
  CHECK(r.status == 2);
  CHECK(r.output ==
        "stepscope: " + dir.file("notes.txt") +
            ": unrecognized format (expected a stepscope store, Kineto/Chrome trace JSON or an Nsight "
            "Systems SQLite export; plain, .gz or .zst)\n");  // analyze's words

  auto m = run("info " + dir.file("absent.db"));
  CHECK(m.status == 2);
  CHECK(m.output == "stepscope: " + dir.file("absent.db") + ": no such file\n");

  auto d = run("info " + dir.path().string());
  CHECK(d.status == 2);
  CHECK(d.output ==
        "stepscope: " + dir.path().string() +
            ": is a directory: name a file in it (analyze, report and import also read a folder's "
            "files)\n");
}

TEST_CASE("import DIR merges the traces in the folder, as naming them does") {
  stepscope::test::ScratchDir dir("cli_import_dir");
  std::filesystem::create_directories(dir.file("job"));
  for (int rank = 0; rank < 2; ++rank)
    std::ofstream(dir.file("job/rank" + std::to_string(rank) + ".json"))
        << R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":)" << rank
        << R"(,"tid":7,"ts":10,"dur":5,"args":{"device":0,"stream":7}},)"
        << R"({"ph":"X","cat":"cpu_op","name":"op","pid":)" << rank << R"(,"tid":1,"ts":1,"dur":20}]})";
  std::ofstream(dir.file("job/notes.txt")) << "not a trace\n";  // passed over, as by analyze DIR
  auto folder = run("import " + dir.file("job") + " -o " + dir.file("folder.db"));
  auto named = run("import " + dir.file("job/rank0.json") + " " + dir.file("job/rank1.json") + " -o " +
                   dir.file("named.db"));
  REQUIRE(folder.status == 0);
  REQUIRE(named.status == 0);
  CHECK(folder.output ==
        dir.file("folder.db") +
            ": 2 kernels, 0 memcpys, 0 memsets, 0 API calls, 0 syncs, 2 ranges, 0 steps, 0 data "
            "waits, 0 samples (from kineto-json)\n");
  CHECK(named.output.substr(named.output.find(':')) == folder.output.substr(folder.output.find(':')));
  // The output in the folder: not an input of the same command run again.
  for (int again = 0; again < 2; ++again) {
    auto inside = run("import " + dir.file("job") + " -o " + dir.file("job/all.db"));
    CHECK(inside.status == 0);
    CHECK(inside.output.find(": 2 kernels,") != std::string::npos);
  }
  // Under another name it would be: a store imported from the folder's own files, their rows counted twice.
  auto twice = run("import " + dir.file("job") + " -o " + dir.file("job/other.db"));
  CHECK(twice.status == 2);
  CHECK(twice.output ==
        "stepscope: " + dir.file("job/all.db") +
            ": a store imported from rank0.json, which is in this folder too: its rows would count "
            "twice (name the files to import, or move it out)\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("job/other.db")));
}

TEST_CASE("info reads a raw trace as analyze does: the rows and findings of the store import would make") {
  STEPSCOPE_REQUIRE_TRACES();
  stepscope::test::ScratchDir dir("cli_info_trace");
  const std::string trace = stepscope::test::trace_path("hta/alexnet_a100.json.gz");
  auto r = run("info " + trace);
  REQUIRE(r.status == 0);
  CHECK(r.output.rfind(trace + "  (kineto-json trace, not a stepscope store: imported on the fly", 0) == 0);
  REQUIRE(run("import " + trace + " -o " + dir.file("alexnet.db")).status == 0);
  auto s = run("info " + dir.file("alexnet.db"));
  REQUIRE(s.status == 0);
  // Every table row, the span, the findings line and the devices say the same of both (a store keeps only the
  // strings in use, and the invariant is a store's).
  std::istringstream store_lines(s.output);
  int compared = 0;
  for (std::string line; std::getline(store_lines, line);) {
    if (line.rfind("strings ", 0) == 0 || line.rfind("invariant", 0) == 0 ||
        line.find(" = ") != std::string::npos || line.rfind(dir.file("alexnet.db"), 0) == 0 || line.empty())
      continue;
    INFO(line);
    CHECK(r.output.find(line + "\n") != std::string::npos);
    ++compared;
  }
  CHECK(compared > 20);
  CHECK(r.output.find("kernels ") != std::string::npos);
  auto j = run("info --json " + trace);
  CHECK(j.status == 0);
  CHECK(j.output.find("\"kind\":\"trace\",\"source_format\":\"kineto-json\"") != std::string::npos);

  std::ofstream(dir.file("no_events.json")) << "{\"x\": 1}\n";
  auto bad = run("info " + dir.file("no_events.json"));
  CHECK(bad.status == 2);
  CHECK(bad.output == "stepscope: " + dir.file("no_events.json") + ": not a trace: no traceEvents array\n");
}

TEST_CASE("usage errors are one stepscope: line naming where the usage is, exit code 2") {
  auto a = run("attach abc");
  CHECK(a.status == 2);
  CHECK(a.output == "stepscope: Could not convert: pid = abc (usage: stepscope attach --help)\n");
  auto u = run("bogus");
  CHECK(u.status == 2);
  CHECK(u.output == "stepscope: unknown command 'bogus' (usage: stepscope --help)\n");
  auto f = run("analyze");
  CHECK(f.status == 2);
  CHECK(f.output == "stepscope: FILE is required (usage: stepscope analyze --help)\n");
  auto o = run("info --no-such-option x.db");
  CHECK(o.status == 2);
  CHECK(o.output.rfind("stepscope: ", 0) == 0);
  CHECK(std::count(o.output.begin(), o.output.end(), '\n') == 1);
}

TEST_CASE("record of a command that does not exist: one line, exit 127, no store") {
  stepscope::test::ScratchDir dir("cli_no_command");
  auto r = run("record --no-gpu -o " + dir.file("r.db") + " -- " + dir.file("does_not_exist"));
  CHECK(r.status == 127);
  CHECK(r.output == "stepscope: " + dir.file("does_not_exist") + " not found: No such file or directory (no store written)\n");
  CHECK(!std::filesystem::exists(dir.file("r.db")));
  CHECK(!std::filesystem::exists(dir.file("r.db.parts")));
  // What Python accepts and std::regex would not (lookbehind, a named group, inline flags, a possessive
  // repeat, a verbose pattern's comment) is left to the program's re.compile.
  const auto ok =
      run("record --no-gpu --step-func '(?<=x)(?P<n>a)(?i:b)c*+' --data-wait-func '(?x) a # (' -o " +
          dir.file("ok.db") + " -- true");
  INFO(ok.output);
  CHECK(ok.status == 0);
}

TEST_CASE(
    "record, attach, import, report and diff into a missing folder: one line naming it, exit 2, nothing "
    "created") {
  // Stores live 0600 in 0700 folders: record used to create the missing folder 0755 (issue 47).
  stepscope::test::ScratchDir dir("cli_no_folder");
  const std::string missing = dir.file("nonexistent/dir"), out = missing + "/y.db";
  for (const char* flags : {"", "--flight 5s "}) {
    auto r = run(std::string("record --no-gpu ") + flags + "-o " + out + " -- true");
    INFO(flags);
    CHECK(r.status == 2);
    CHECK(r.output == "stepscope: " + out + ": no such folder " + missing + " (create it first)\n");
    CHECK(!std::filesystem::exists(dir.file("nonexistent")));
  }
  // attach refuses before it touches the process (its own pid here: nothing is attached).
  auto a = run("attach " + std::to_string(::getpid()) + " --duration 1 -o " + out);
  CHECK(a.status == 2);
  CHECK(a.output == "stepscope: " + out + ": no such folder " + missing + " (create it first)\n");
  CHECK(!std::filesystem::exists(dir.file("nonexistent")));
  // import checks before it imports (a long import would fail only at its end, naming its temporary file).
  stepscope::store::Trace t;
  t.processes.push_back({1, t.intern("p"), 0});
  stepscope::store::write_store_atomically(t, dir.file("in.db"));
  auto i = run("import " + dir.file("in.db") + " -o " + out);
  CHECK(i.status == 2);
  CHECK(i.output == "stepscope: " + out + ": no such folder " + missing + " (create it first)\n");
  CHECK(!std::filesystem::exists(dir.file("nonexistent")));
  // report and diff's outputs in the same words (they said "cannot create: No such file or directory" and
  // "nonexistent/dir is not a folder").
  const std::string html = missing + "/r.html", junit = missing + "/j.xml";
  auto rep = run("report " + dir.file("in.db") + " -o " + html);
  CHECK(rep.status == 2);
  CHECK(rep.output == "stepscope: " + html + ": no such folder " + missing + " (create it first)\n");
  auto d = run("diff " + dir.file("in.db") + " " + dir.file("in.db") + " --junit " + junit);
  CHECK(d.status == 2);
  CHECK(d.output == "stepscope: " + junit + ": no such folder " + missing + " (create it first)\n");
  CHECK(!std::filesystem::exists(dir.file("nonexistent")));
  // A file where the folder should be.
  { std::ofstream(dir.file("plain")) << "x"; }
  auto f = run("record --no-gpu -o " + dir.file("plain/y.db") + " -- true");
  CHECK(f.status == 2);
  CHECK(f.output == "stepscope: " + dir.file("plain/y.db") + ": " + dir.file("plain") + " is not a folder\n");
  // A folder named as the output: refused before the work (import wrote the whole store, then its rename
  // failed and said "cannot write: Success").
  std::filesystem::create_directory(dir.file("adir"));
  for (const std::string& cmd : {"import " + dir.file("in.db") + " -o " + dir.file("adir"),
                                 "record --no-gpu -o " + dir.file("adir") + " -- true"}) {
    INFO(cmd);
    auto d = run(cmd);
    CHECK(d.status == 2);
    CHECK(d.output == "stepscope: " + dir.file("adir") + ": is a folder: name a file in it\n");
  }
  // The same for reports and exports, with or without a trailing slash (it said "cannot replace: Not a
  // directory").
  for (const std::string& o : {dir.file("adir"), dir.file("adir") + "/"}) {
    for (const std::string& cmd : {"export " + dir.file("in.db") + " --format chrome -o " + o,
                                   "report " + dir.file("in.db") + " -o " + o}) {
      INFO(cmd);
      auto d = run(cmd);
      CHECK(d.status == 2);
      CHECK(d.output == "stepscope: " + o + ": is a folder: name a file in it\n");
    }
  }
  CHECK(std::filesystem::is_empty(dir.file("adir")));
}

TEST_CASE("a regular expression that does not compile is refused as the option is read, before any file") {
  // Before: analyze named the file for it, report and diff did not, and record ran the whole program with the
  // collector ignoring it (one line in the program's output).
  stepscope::test::ScratchDir dir("cli_bad_regex");
  const std::string absent = dir.file("absent.db");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"analyze", "analyze --step-regex '(' " + absent},
      {"report", "report --step-regex '(' " + absent},
      {"diff", "diff --step-regex '(' " + absent + " " + absent},
      {"record", "record --no-gpu --step-regex '(' -o " + dir.file("r.db") + " -- true"},
      {"record", "record --no-gpu --data-wait-regex '[' -o " + dir.file("r.db") + " -- true"},
      // Python's regexes (the program's `re` compiles them; it ran to its end without steps, saying on its
      // stderr that the option was ignored).
      {"record", "record --no-gpu --step-func '(' -o " + dir.file("r.db") + " -- true"},
      {"record", "record --no-gpu --data-wait-func 'next|*' -o " + dir.file("r.db") + " -- true"},
      {"attach", "attach --step-func 'train_step)' 1"},
      {"attach", "attach --step-func 'train\\.step\\q' 1"},  // \q: no escape in Python's re
      {"attach", "attach --data-wait-func 'next[\\Z]' 1"},   // \Z: none in a set
      {"attach", "attach --data-wait-func 'next\\x4' 1"},    // \x takes two hex digits
      {"top", "top --data-wait-func '[abc' 1"}};
  for (const auto& [command, line] : cases) {
    INFO(line);
    auto r = run(line);
    CHECK(r.status == 2);
    CHECK(r.output.rfind("stepscope: --", 0) == 0);
    CHECK(r.output.find(line.find("-func") != std::string::npos
                            ? "is not a Python regular expression ("
                            : "is not a regular expression (") != std::string::npos);
    CHECK(r.output.find("absent.db") == std::string::npos);
    CHECK(r.output.ends_with("(usage: stepscope " + command + " --help)\n"));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  CHECK(!std::filesystem::exists(dir.file("r.db")));
  CHECK(!std::filesystem::exists(dir.file("r.db.parts")));
  // The escape named where it is (Python: "bad escape \q at position 11").
  CHECK(run("attach --step-func 'train\\.step\\q' 1").output ==
        "stepscope: --step-func: 'train\\.step\\q' is not a Python regular expression (bad escape \\q at "
        "position 11) "
        "(usage: stepscope attach --help)\n");
}

TEST_CASE("export --format folded refuses a trace without CPU samples in one line") {
  if (!stepscope::test::have_traces()) STEPSCOPE_SKIP("no shared traces");
  stepscope::test::ScratchDir dir("cli_export_folded");
  const std::string k = stepscope::test::trace_path("hta/a100_rank0_many_small_kernels.json.gz");
  auto r = run("export " + k + " --format folded -o " + dir.file("s.txt"));
  CHECK(r.status == 2);
  CHECK(r.output == "stepscope: " + k +
                        ": no CPU samples to fold (a Kineto trace has none; an Nsight Systems export has "
                        "them when nsys sampled the CPU)\n");
  CHECK(!std::filesystem::exists(dir.file("s.txt")));
  auto u = run("export " + k + " --format pprof -o " + dir.file("s.pb"));
  CHECK(u.status == 2);
  CHECK(u.output ==
        "stepscope: pprof: unknown export format (supported: chrome, folded or collapsed, speedscope, svg, "
        "sqlite)\n");
}

TEST_CASE("attach to a kernel thread says it is one") {
  // Any kernel thread (PF_KTHREAD in /proc/PID/stat): kthreadd is pid 2 on most machines, not in every container.
  std::string pid, name;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string n = e.path().filename().string();
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string line;
    if (!std::getline(f, line) || line.rfind(')') == std::string::npos) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    unsigned long flags = 0;
    for (int i = 3; i <= 9 && rest >> field; ++i)
      if (i == 9) flags = std::stoul(field);
    if (flags & 0x00200000) {
      pid = n;
      name = line.substr(line.find('(') + 1, line.rfind(')') - line.find('(') - 1);
      break;
    }
  }
  if (pid.empty()) STEPSCOPE_SKIP("no kernel thread visible in /proc (a container with its own pid namespace)");
  stepscope::test::ScratchDir dir("cli_kthread");
  auto r = run("attach " + pid + " --duration 1 -o " + dir.file("k.db"));
  CHECK(r.status == 2);
  CHECK(r.output == "stepscope: process " + pid + " (" + name + ") is a kernel thread: it runs no program to load the "
                    "collector into\n");
}

TEST_CASE("record and attach take --duration in seconds or with a unit (as top and --flight do) and refuse anything else") {
  for (const char* cmd : {"record --duration 2x -- true", "attach 1 --duration -3", "record --duration 5min -- true"}) {
    auto r = run(cmd);
    INFO(cmd);
    CHECK(r.status == 2);
    CHECK(r.output.find("--duration: expected a duration like 30, 30s, 500ms or 2m, got ") != std::string::npos);
  }
  stepscope::test::ScratchDir dir("cli_duration_units");
  auto r = run("record --no-gpu --duration 300ms -o " + dir.file("d.db") + " -- sleep 20");
  CHECK(r.status == 0);  // SIGINT to sleep at 0.3 s: the recording ended as asked
  CHECK(r.output.find(
            "stepscope: --duration 0.3 s ended the command (its own exit status 130): record exits 0\n") !=
        std::string::npos);
  CHECK(r.output.find("stepscope: --duration 0.3 s reached: SIGINT to sleep") != std::string::npos);
}

TEST_CASE("help lists only implemented subcommands") {
  auto r = run("--help");
  CHECK(r.status == 0);
  CHECK(r.output.find("info") != std::string::npos);
  for (const char* c : {"record", "attach", "detach", "start", "stop"}) CHECK(r.output.find(c) != std::string::npos);
  auto rec = run("record --help");
  CHECK(rec.output.find("--paused") != std::string::npos);
  CHECK(rec.output.find("%r the rank (one store per rank: -o run-%r.db), %p the pid, %h the host, %% a percent sign") !=
        std::string::npos);
  auto att = run("attach --help");
  for (const char* o : {"--duration", "--cpu-hz", "--no-gpu", "--children", "--wall", "--step-regex"})
    CHECK(att.output.find(o) != std::string::npos);
}

TEST_CASE("a Kineto trace's gpu_user_annotation ranges keep the invariant, and info counts the findings analyze reports") {
  STEPSCOPE_REQUIRE_TRACES();
  stepscope::test::ScratchDir dir("cli_info_gpu_annotations");
  const std::string db = dir.file("ann.db");
  REQUIRE(run("import " + stepscope::test::trace_path("hta/gpu_user_annotation_steps.json.gz") + " -o " + db).status == 0);
  auto info = run("info " + db);
  CHECK(info.status == 0);
  // Its 10 gpu_user_annotation ranges lie on device 0, stream 7: a GPU timeline, not a host thread.
  CHECK(info.output.find("invariant: every pid and thread in processes / threads: ok") != std::string::npos);
  auto analyzed = run("analyze --json " + db);
  REQUIRE(analyzed.status == 0);
  size_t findings = 0;  // the findings array's objects (what_if's cures name rules too, after top_kernels)
  const size_t end = analyzed.output.find("\"top_kernels\":");
  REQUIRE(end != std::string::npos);
  for (size_t p = analyzed.output.find("{\"rule\":"); p < end; p = analyzed.output.find("{\"rule\":", p + 1))
    ++findings;
  REQUIRE(findings >= 1);
  CHECK(info.output.find("findings: " + std::to_string(findings) + " (what `stepscope analyze` reports; 0 stored") !=
        std::string::npos);
  auto j = run("info --json " + db);
  CHECK(j.output.find("\"findings\":" + std::to_string(findings) + ",\"findings_stored\":0") != std::string::npos);
}

TEST_CASE("a mistyped or misplaced option is named, with the nearest one and what to do") {
  // CLI11 said "The following argument was not expected: true" of `record --cpuhz 100 -- true`.
  auto typo = run("record --cpuhz 100 -- true");
  CHECK(typo.status == 2);
  CHECK(typo.output ==
        "stepscope: unknown option --cpuhz (did you mean --cpu-hz?) (usage: stepscope record --help)\n");
  auto json = run("analyze --jsn x.db");
  CHECK(json.status == 2);
  CHECK(json.output ==
        "stepscope: unknown option --jsn (did you mean --json?) (usage: stepscope analyze --help)\n");
  auto far = run("record --bogus -- true");
  CHECK(far.output == "stepscope: unknown option --bogus (usage: stepscope record --help)\n");
  // The command's own options without a -- before it.
  auto no_dashes = run("record -o /nonexistent/x.db python3 -c 1");
  CHECK(no_dashes.status == 2);
  CHECK(no_dashes.output.find("options after the command are the command's own: put -- before it (stepscope "
                              "record [options] -- COMMAND ARGS...)") != std::string::npos);
  // Options before the command's name.
  auto before = run("-o x.db record -- true");
  CHECK(before.status == 2);
  CHECK(before.output ==
        "stepscope: options go after the command's name (stepscope record -o ...) (usage: stepscope record "
        "--help)\n");
}

TEST_CASE("analyze fits its text to the terminal: bars narrower or left out and prose wrapped at words") {
  const std::string xz = stepscope::test::traces_dir() + "/../recordings/h100-2026-11-22/input_bound.db.xz";
  if (!std::ifstream(xz)) STEPSCOPE_SKIP(("H100 recordings not found at " + xz).c_str());
  stepscope::test::ScratchDir dir("cli_analyze_columns");
  const std::string db = dir.file("input_bound.db");
  REQUIRE(stepscope::test::run_shell("xz -dc " + stepscope::test::shell_quote(xz) + " > " +
                                     stepscope::test::shell_quote(db))
              .status == 0);
  const std::string cli = std::string(STEPSCOPE_CLI) + " analyze " + stepscope::test::shell_quote(db);
  // Not a terminal and no COLUMNS: the fixed layout, 40-character bars, nothing wrapped.
  const auto fixed = stepscope::test::run_shell("env -u COLUMNS " + cli);
  REQUIRE(fixed.status == 0);
  CHECK(fixed.output.find("\nBars: # GPU busy, D data, S sync, L launch, H host, . other, P profiler\n") !=
        std::string::npos);
  CHECK(fixed.output.find("  input   |###DDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDSH|\n") != std::string::npos);
  CHECK(fixed.output.find(
            "\n1. [high] input-bound: The GPU waits for input 68.3% of the step time (2.24 ms of the "
            "mean 3.28 ms step) while the training loop loads the next batch.\n") != std::string::npos);
  CHECK(widest(fixed.output) > 200);
  // The same words whatever the width, only the line breaks differ (the bars and their legend aside).
  auto words = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Bars: ", 0) == 0) continue;
      std::istringstream ws(line);
      for (std::string w; ws >> w;)
        if (w.front() != '|') out.push_back(w);
    }
    return out;
  };
  for (const int columns : {80, 100, 120}) {
    INFO(columns);
    const auto r = stepscope::test::run_shell("COLUMNS=" + std::to_string(columns) + " " + cli);
    REQUIRE(r.status == 0);
    CHECK(widest(r.output) <= size_t(columns));
    CHECK(words(r.output) == words(fixed.output));
    // The rows' bars are as wide as the terminal leaves after 76 columns of figures and 2 of frame: none
    // at 80.
    const size_t bar = columns == 80 ? 0 : std::min<size_t>(40, size_t(columns) - 78);
    CHECK((r.output.find("\nBars: ") != std::string::npos) == (bar > 0));
    const std::string row0 = "\n    0      3.036    8.3   87.2    3.0    0.0    1.3    0.0       2  input";
    const size_t at = r.output.find(row0);
    REQUIRE(at != std::string::npos);
    const std::string rest =
        r.output.substr(at + row0.size(), r.output.find('\n', at + 1) - at - row0.size());
    if (bar == 0) CHECK(rest.empty());
    if (bar > 0) CHECK((rest.rfind("   |##", 0) == 0 && rest.back() == '|' && rest.size() == 5 + bar));
  }
  // A numbered finding continues under its text; a figure is not parted from its unit.
  const auto narrow = stepscope::test::run_shell("COLUMNS=80 " + cli);
  CHECK(
      narrow.output.find("\n1. [high] input-bound: The GPU waits for input 68.3% of the step time (2.24 ms\n"
                         "   of the mean 3.28 ms step) while the training loop loads the next batch.\n") !=
      std::string::npos);
  CHECK(narrow.output.find(" data wait\n    3.83 ms vs 1.51 ms (+2.32 ms);") != std::string::npos);
  // report -f text to a terminal: its bars fit too (rows of 93 columns of figures: none at 100, 27 at 120).
  const std::string report =
      std::string(STEPSCOPE_CLI) + " report -f text " + stepscope::test::shell_quote(db);
  const std::string report_row0 =
      "\n     0    3.04 ms     251 µs       0 µs    38.3 µs    2.65 ms    89.9 µs       0 µs  input";
  const auto report100 = stepscope::test::run_shell("COLUMNS=100 " + report);
  CHECK(report100.output.find("\nSteps\n") != std::string::npos);
  CHECK(report100.output.find(report_row0 + "\n") != std::string::npos);
  const auto report120 = stepscope::test::run_shell("COLUMNS=120 " + report);
  CHECK(report120.output.find(report_row0 + "   #HDDDDDDDDDDDDDDP\n") != std::string::npos);
  const auto report_fixed = stepscope::test::run_shell("env -u COLUMNS " + report);
  CHECK(report_fixed.output.find(report_row0 + "   ##DDDDDDDDDDDDDDDDDDDDDD\n") != std::string::npos);
  // A suggestion's prose is one paragraph at the finding's indent, its code two columns in.
  CHECK(
      narrow.output.find("   Load and decode the next batches on worker threads ahead of the training loop\n"
                         "   and copy them from pinned buffers on a copy stream, so the GPU never waits\n"
                         "   for the host:\n     cudaMallocHost(&staging[i], bytes);") != std::string::npos);
}

TEST_CASE(
    "diff fits its text to the terminal: each metric's statistics under its row where the table would wrap") {
  const std::string dir_rec = stepscope::test::traces_dir() + "/../recordings/h100-2026-11-22/";
  if (!std::ifstream(dir_rec + "input_bound.db.xz")) STEPSCOPE_SKIP("H100 recordings not found");
  stepscope::test::ScratchDir dir("cli_diff_columns");
  for (const char* name : {"input_bound", "input_bound_prefetch"})
    REQUIRE(stepscope::test::run_shell("xz -dc " + stepscope::test::shell_quote(dir_rec + name + ".db.xz") +
                                       " > " +
                                       stepscope::test::shell_quote(dir.file(std::string(name) + ".db")))
                .status == 0);
  // Run in the folder, the files named short: a path longer than the terminal is one word no wrapping breaks.
  const std::string cli =
      stepscope::test::shell_quote(STEPSCOPE_CLI) + " diff input_bound.db input_bound_prefetch.db";
  const std::string in_dir = "cd " + stepscope::test::shell_quote(dir.path().string()) + " && ";
  const auto fixed = stepscope::test::run_shell(in_dir + "env -u COLUMNS " + cli);
  REQUIRE(fixed.status == 0);
  const std::string row = "Step time (median)      2.57 ms     681 µs    -73.5%";
  const std::string wide_row =
      "\n" + row + "       -82.1% … -72.8%     ±5.0%  p=0.0005 (Holm 0.0030)   improvement\n";
  CHECK(fixed.output.find(wide_row) != std::string::npos);
  // A terminal as wide as the table: its rows as they are (its notes wrapped).
  CHECK(stepscope::test::run_shell(in_dir + "COLUMNS=130 " + cli).output.find(wide_row) != std::string::npos);
  const auto narrow = stepscope::test::run_shell(in_dir + "COLUMNS=80 " + cli);
  REQUIRE(narrow.status == 0);
  CHECK(widest(fixed.output) > 120);
  CHECK(widest(narrow.output) <= 80);
  CHECK(narrow.output.find(
            "\nmetric                     base        new    change  verdict\n" + row +
            "  improvement\n    95% CI -82.1% … -72.8%, threshold ±5.0%, p=0.0005 (Holm 0.0030)\n") !=
        std::string::npos);
  // Past the metrics, the same words: only the line breaks differ.
  auto words_after_metrics = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text.substr(text.find("\nnote: ")));
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  CHECK(words_after_metrics(narrow.output) == words_after_metrics(fixed.output));
  CHECK(
      narrow.output.find("\n  disappeared  input-bound          high → -      The GPU waits for input 68.3%\n"
                         "    of the step time") != std::string::npos);
}
