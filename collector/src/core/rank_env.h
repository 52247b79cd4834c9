// Which rank of a distributed job this process is, from the launchers' environment variables (torchrun,
// SLURM srun, Open MPI mpirun, MPICH/Intel MPI PMI). Shared by the collector (meta of each part) and the
// launcher (`record -o run-%r.db`). docs/collector.md, "Several ranks".
#pragma once

#include <cstdlib>
#include <map>
#include <string>

namespace stepscope::collector {

// meta keys "rank", "world_size", "local_rank" and "job" (the job id) for those the environment gives; empty
// when not a rank.
inline std::map<std::string, std::string> rank_from_env() {
  auto first = [](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (const char* v = std::getenv(n); v && *v) return v;
    return {};
  };
  std::map<std::string, std::string> m;
  const std::string rank = first({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  if (rank.empty() || rank.find_first_not_of("0123456789") != std::string::npos) return m;
  m["rank"] = rank;
  const std::string world = first({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  if (!world.empty()) m["world_size"] = world;
  const std::string local = first(
      {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"});
  if (!local.empty()) m["local_rank"] = local;
  // Which job: the analyzer combines stores as ranks only when their job ids agree (docs/multi-rank.md).
  // torchrun's run id is "none" unless --rdzv-id/--standalone set it; MASTER_ADDR:PORT then tells jobs apart.
  const std::string slurm = first({"SLURM_JOB_ID"}), step = first({"SLURM_STEP_ID"});
  const std::string elastic = first({"TORCHELASTIC_RUN_ID"});
  const std::string pmix = first({"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"});
  const std::string addr = first({"MASTER_ADDR"}), port = first({"MASTER_PORT"});
  if (!slurm.empty())
    m["job"] = "slurm:" + slurm + (step.empty() ? "" : "." + step);
  else if (!elastic.empty() && elastic != "none")
    m["job"] = "torchelastic:" + elastic;
  else if (!pmix.empty())
    m["job"] = "mpi:" + pmix;
  else if (!addr.empty() && !port.empty())
    m["job"] = "master:" + addr + ":" + port;
  return m;
}

}  // namespace stepscope::collector
