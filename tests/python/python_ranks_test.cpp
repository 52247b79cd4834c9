// `stepscope record -o run-%r.db -- torchrun ...`: a real data-parallel job (DDP over gloo on CPU, 2 ranks)
// gives one store per rank with its rank in meta, and `analyze` takes them together (issue 16).
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>

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

TEST_CASE("torchrun --nproc_per_node 2 (gloo, CPU) under record -o run-%r.db gives one store per rank") {
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

  for (int rank : {0, 1}) {
    const std::string db = dir.file("run-" + std::to_string(rank) + ".db");
    REQUIRE(std::filesystem::exists(db));
    store::StoreReader reader(db);
    auto meta = reader.meta();
    CHECK(meta["rank"] == std::to_string(rank));
    CHECK(meta["world_size"] == "2");
    CHECK(meta["local_rank"] == std::to_string(rank));
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
