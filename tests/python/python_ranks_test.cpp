// `stepscope record -o run-%r.db -- torchrun ...`: a real data-parallel job (DDP over gloo on CPU, 2 ranks)
// gives one store per rank with its rank in meta, and `analyze` takes them together (issue 16); under
// `--flight`, each save is split per rank the same way (issue 25).
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "python_test_support.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using namespace stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_CLI;
const std::string kVenv = STEPSCOPE_PYTHON_VENV;

std::string missing_torchrun() {
  const std::string py = kVenv + "/bin/python";
  if (run_shell(shell_quote(py) + " -c 'import torch.distributed' >/dev/null 2>&1").status != 0)
    return "the venv python " + py + " cannot import torch.distributed (run scripts/python-env.sh)";
  if (!std::filesystem::exists(kVenv + "/bin/torchrun")) return "no torchrun in " + kVenv + "/bin";
  return "";
}

}  // namespace

TEST_CASE("torchrun --nproc_per_node 2 (gloo, CPU) under record -o run-%r.db gives one store per rank",
          "[framework]") {
  if (auto why = missing_torchrun(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_ranks");
  const std::string pattern = dir.file("run-%r.db");
  const auto r = run_shell(
      "cd " + shell_quote(dir.path().string()) + " && " + shell_quote(kCli) + " record -o " +
      shell_quote(pattern) + " -- " + shell_quote(kVenv + "/bin/torchrun") + " --nproc_per_node 2 " +
      shell_quote(source_dir() + "/samples/cpu/python_ddp_gloo.py") + " --steps 20 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("rank 0 of 2 (local 0): 20 steps") != std::string::npos);
  CHECK(r.output.find("rank 1 of 2 (local 1): 20 steps") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(pattern));  // %r was replaced
  CHECK_FALSE(std::filesystem::exists(pattern + ".parts"));

  std::string job;
  for (int rank : {0, 1}) {
    const std::string db = dir.file("run-" + std::to_string(rank) + ".db");
    REQUIRE(std::filesystem::exists(db));
    store::StoreReader reader(db);
    auto meta = reader.meta();
    CHECK(meta["rank"] == std::to_string(rank));
    CHECK(meta["world_size"] == "2");
    CHECK(meta["local_rank"] == std::to_string(rank));
    // The job id from torchrun's environment (its run id, or MASTER_ADDR:MASTER_PORT): the same in both
    // ranks.
    CHECK((meta["job"].rfind("torchelastic:", 0) == 0 || meta["job"].rfind("master:", 0) == 0));
    if (rank == 0) job = meta["job"];
    CHECK(meta["job"] == job);
    CHECK_FALSE(meta["host"].empty());
    // The rank's own Python process only: the other rank and torchrun's agent are in their own stores.
    CHECK(reader.processes().size() == 1);
    CHECK(reader.steps().size() >= 19);  // optimizer steps, found by the Python hook
  }
  // torchrun's agent is outside every rank: a store of its own.
  REQUIRE(std::filesystem::exists(dir.file("run-launcher.db")));
  CHECK(store::StoreReader(dir.file("run-launcher.db")).meta().count("rank") == 0);

  // The directory (launcher store included) analyzes as two aligned ranks.
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(dir.path().string()) + " 2>&1");
  INFO(a.output);
  REQUIRE(a.status == 0);
  CHECK(a.output.find("2 rank(s), 19 step(s) aligned") != std::string::npos);
  CHECK(a.output.find("run-launcher.db: no rank, unlike the others; left out") != std::string::npos);
}

TEST_CASE("under srun/mpirun stepscope knows its rank: %r, %h and %% are replaced at once") {
  ScratchDir dir("python_ranks_env");
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof host - 1) == 0);
  // What srun gives each task; the recorded command needs no Python.
  const auto r =
      run_shell("cd " + shell_quote(dir.path().string()) +
                " && env -u RANK SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 " + shell_quote(kCli) +
                " record --no-gpu -o 'run-%r-%h-%%.db' -- /bin/sleep 0.2 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string db = dir.file("run-5-" + std::string(host) + "-%.db");
  REQUIRE(std::filesystem::exists(db));
  auto meta = store::StoreReader(db).meta();
  CHECK(meta["rank"] == "5");
  CHECK(meta["world_size"] == "8");
  CHECK(meta["local_rank"] == "1");
  CHECK(meta["host"] == host);
}

TEST_CASE(
    "record --flight -o run-%r.db: one straggler step is one save, a dump one more, each as one store per rank") {
  if (auto why = missing_torchrun(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_ranks_flight");
  const std::string ready = dir.file("rank0-ready"), done = dir.file("done");
  // On until the test is done with it (a fixed 12 s ended before the dump on a loaded machine).
  const std::string tag = "--steps 20 --seconds 150 --until-file " + done;
  // Rank 1 sleeps 900 ms in its 40th step: both ranks' step 38 (the optimizer hook's steps run from one
  // opt.step() to the next) is slow, rank 0's waiting at the gradient all-reduce. The 400 ms floor keeps a
  // step preempted on the loaded suite machine from saving too.
  Spawned rec = spawn_shell(
      "cd " + shell_quote(dir.path().string()) + " && " + shell_quote(kCli) +
      " record --flight 30s --trigger slow-step=3x+400ms -o 'run-%r.db' -- " +
      shell_quote(kVenv + "/bin/torchrun") + " --nproc_per_node 2 " +
      shell_quote(source_dir() + "/samples/cpu/python_ddp_gloo.py") + " " + tag + " --ready-file " +
      shell_quote(ready) + " --ready-steps 60 --slow-rank 1 --slow-ms 900 --stall-at 40 > record.log 2>&1");
  struct StopTrainer {  // also when a REQUIRE below ends the test early
    std::string file;
    ~StopTrainer() { std::ofstream(file).close(); }
  } stop_trainer{done};
  // Rank 0's process: torchrun's agent names the sample on its command line too, but has no RANK.
  const auto pid = run_shell("for i in $(seq 300); do for p in $(pgrep -f 'python_ddp_gloo.py " + tag +
                             "'); do if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=0; then "
                             "echo $p; exit 0; fi; done; sleep 0.1; done; exit 1");
  REQUIRE(pid.status == 0);
  // Both ranks past torch's import and gloo's rendezvous and the stall, 60 steps taken: on a loaded machine
  // (the sanitized suite beside it) a fixed 5 s wait ended while they were still importing. Then the stall's
  // save written (its three stores), so that the dump comes after it.
  const auto ready_wait =
      run_shell("for i in $(seq 1200); do [ -e " + shell_quote(ready) + " ] && [ $(grep -c 'flight: saved .*-step' " +
                shell_quote(dir.file("record.log")) + ") -ge 3 ] && exit 0; sleep 0.1; done; exit 1");
  INFO(slurp(dir.file("record.log")));
  REQUIRE(ready_wait.status == 0);
  const auto d = run_shell(shell_quote(kCli) + " dump " + pid.output.substr(0, pid.output.find('\n')) + " 2>&1");
  std::ofstream(done).close();  // the trainer ends
  INFO(d.output);
  REQUIRE(d.status == 0);
  CHECK(rec.wait() == 0);
  const std::string log = slurp(dir.file("record.log"));
  INFO(log);
  // One store per rank and one for the agent, printed by dump; %r replaced in each.
  std::vector<std::string> printed;
  std::istringstream lines(d.output);
  for (std::string l; std::getline(lines, l);) printed.push_back(std::filesystem::path(l).filename().string());
  REQUIRE(printed.size() == 3);
  REQUIRE(printed[0].rfind("run-0-", 0) == 0);
  const std::string stamp = printed[0].substr(5);  // "-<UTC time>-dump.db"
  CHECK(printed == std::vector<std::string>{"run-0" + stamp, "run-1" + stamp, "run-launcher" + stamp});
  CHECK(stamp.substr(stamp.size() - 8) == "-dump.db");
  for (int rank : {0, 1}) {
    store::StoreReader reader(dir.file("run-" + std::to_string(rank) + stamp));
    auto meta = reader.meta();
    CHECK(meta["rank"] == std::to_string(rank));
    CHECK(meta["world_size"] == "2");
    CHECK(meta["flight.trigger"] == "dump");
    CHECK(reader.processes().size() == 1);  // the rank's own process: the other rank is in its own store
    CHECK(reader.steps().size() >= 20);     // its optimizer steps of the last seconds
  }
  CHECK(store::StoreReader(dir.file("run-launcher" + stamp)).meta().count("rank") == 0);
  CHECK_FALSE(std::filesystem::exists(dir.file("run-%r" + stamp)));

  // The stall: each rank saw its step 38 slow, and one save holds it. The first rank to save made it; the
  // other found that save (made since its own trigger fired) and joined it, its part in it. A step that a
  // loaded machine (the sanitized suite beside it) really slowed past the trigger is saved too (once seen:
  // step 94 at 478 ms, 54x the median): such a save is allowed where its step, in its own store, is slower
  // than the trigger's floor.
  std::map<std::string, std::vector<std::string>> step_saves;  // "-<UTC time>-stepN.db" -> its files
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    if (name.find("-step") == std::string::npos) continue;
    const auto dash = name.find('-', 4);  // after "run-0", "run-1", "run-launcher"
    REQUIRE(dash != std::string::npos);
    step_saves[name.substr(dash)].push_back(name);
  }
  std::string step_stamp;
  size_t saved_files = 0;
  for (auto& [stamp, files] : step_saves) {
    INFO(stamp);
    std::sort(files.begin(), files.end());
    saved_files += files.size();
    if (stamp.substr(stamp.size() - 10) == "-step38.db") {
      CHECK(files == std::vector<std::string>{"run-0" + stamp, "run-1" + stamp, "run-launcher" + stamp});
      step_stamp = stamp;
    }
    // A rank's own slow step: its store (and the other rank's where it joined) and the launcher's.
    CHECK(files.back() == "run-launcher" + stamp);
    REQUIRE(files.size() >= 2);
    // The saved step, in the store's own steps (the planted one checks the numbering in every run).
    store::StoreReader saved(dir.file(files[0]));
    const int64_t n = std::stoll(saved.meta()["flight.step"]);
    bool slow = false;
    for (const auto& st : saved.steps()) slow |= st.index == n && st.end - st.start >= 400000000;
    CHECK(slow);
  }
  REQUIRE_FALSE(step_stamp.empty());
  int joined = 0;
  for (int rank : {0, 1}) {
    auto meta = store::StoreReader(dir.file("run-" + std::to_string(rank) + step_stamp)).meta();
    CHECK(meta["flight.trigger"] == "slow-step");
    CHECK(meta["flight.step"] == "38");
    joined += meta["flight.joined_triggers"] == "1";
  }
  CHECK(joined == 1);
  CHECK(log.find("flight recorder: " + std::to_string(saved_files + 3) + " windows saved") !=
        std::string::npos);
  // The ranks of one save are one job's ranks (issue 47: flight saves combine only within one save).
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(dir.file("run-0" + stamp)) + " " +
                           shell_quote(dir.file("run-1" + stamp)) + " " +
                           shell_quote(dir.file("run-launcher" + stamp)) + " 2>&1");
  INFO(a.output);
  CHECK(a.status == 0);
  CHECK(a.output.rfind("2 rank(s), ", 0) == 0);
}
