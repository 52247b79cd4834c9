#!/usr/bin/env python3
"""The fleet step of docs/scale.md, measured with DuckDB (PyPI `duckdb`, in a virtual environment of its own).

Input: directories written by `stepscope analyze RANKS... --rank-csv DIR --job NAME` (rank_steps.csv,
rank_collectives.csv), one per job or per node. The script
  1. converts them to Parquet (what a fleet would keep in object storage, there partitioned by date and job);
  2. runs the straggler / exposed-communication query over all jobs (docs/scale.md, "The query");
  3. optionally (--replicate N) multiplies the rows into N copies of every job, to time the query on a fleet
     larger than this machine can record.

    fleet_query.py OUT_DIR CSV_DIR... [--jobs-of K] [--replicate N]

--jobs-of K splits the ranks of each input into jobs of K consecutive ranks (the synthetic bench ranks are
8-rank DLRM jobs written as one directory). Prints the top rows and the timings.
"""
import argparse
import os
import time

import duckdb

QUERY = """
WITH ranks AS (                       -- how many ranks each job has
  SELECT job, count(DISTINCT rank) AS n FROM steps GROUP BY job
), c AS (                             -- each collective on each rank, ordered by kernel duration
  SELECT job, step, kind, ordinal, rank, dur_ns, exposed_ns,
         row_number() OVER (PARTITION BY job, step, kind, ordinal ORDER BY dur_ns, rank) AS pos,
         count(*) OVER (PARTITION BY job, step, kind, ordinal) AS present
  FROM collectives
), matched AS (                       -- only collectives every rank of the job has
  SELECT c.* FROM c JOIN ranks USING (job) WHERE c.present = ranks.n
), last_arrival AS (                  -- shortest kernel = last rank to arrive; its wait-free exposed time
  SELECT l.job, l.step, l.rank, s.dur_ns - l.dur_ns AS caused_ns, l.exposed_ns
  FROM matched l JOIN matched s ON s.job = l.job AND s.step = l.step AND s.kind = l.kind
                               AND s.ordinal = l.ordinal AND s.pos = 2
  WHERE l.pos = 1
), per_step AS (
  SELECT job, step, rank, sum(caused_ns) AS caused_ns FROM last_arrival GROUP BY ALL
), exposed AS (
  SELECT job, step, sum(exposed_ns) AS critical_exposed_ns FROM last_arrival GROUP BY ALL
), median_step AS (
  SELECT job, step, quantile_disc(dur_ns, 0.5) AS median_ns FROM steps GROUP BY ALL
), straggler AS (                     -- per job: the rank that caused the most waiting
  SELECT job, arg_max(rank, total) AS rank, max(total) AS caused_total_ns
  FROM (SELECT job, rank, sum(caused_ns) AS total FROM per_step GROUP BY ALL) GROUP BY job
)
SELECT s.job, s.rank AS straggler,
       avg(p.caused_ns) FILTER (WHERE p.caused_ns >= 20000 AND p.caused_ns >= 0.05 * m.median_ns) / 1000
         AS saving_us_per_step,
       avg(e.critical_exposed_ns) / 1000 AS critical_exposed_us_per_step,
       avg(m.median_ns) / 1000 AS median_step_us
FROM straggler s
JOIN per_step p ON p.job = s.job AND p.rank = s.rank
JOIN median_step m ON m.job = p.job AND m.step = p.step
JOIN exposed e ON e.job = p.job AND e.step = p.step
GROUP BY s.job, s.rank
ORDER BY saving_us_per_step DESC NULLS LAST, s.job
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("csv_dirs", nargs="+")
    ap.add_argument("--jobs-of", type=int, default=0)
    ap.add_argument("--replicate", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    db = duckdb.connect()
    steps = " UNION ALL ".join(f"SELECT * FROM read_csv_auto('{d}/rank_steps.csv')" for d in a.csv_dirs)
    colls = " UNION ALL ".join(f"SELECT * FROM read_csv_auto('{d}/rank_collectives.csv')" for d in a.csv_dirs)
    job = f"job || '-' || CAST(rank // {a.jobs_of} AS VARCHAR)" if a.jobs_of else "job"
    rep = f", range(0, {a.replicate}) AS r(copy)" if a.replicate > 1 else ""
    job_rep = f"{job} || '/' || CAST(copy AS VARCHAR)" if a.replicate > 1 else job

    t0 = time.perf_counter()
    for name, src in (("steps", steps), ("collectives", colls)):
        path = os.path.join(a.out, name)
        db.execute(f"COPY (SELECT * REPLACE ({job_rep} AS job) FROM ({src}){rep}) TO '{path}.parquet' "
                   "(FORMAT parquet, COMPRESSION zstd)")
    t1 = time.perf_counter()
    db.execute(f"CREATE VIEW steps AS SELECT * FROM read_parquet('{a.out}/steps.parquet')")
    db.execute(f"CREATE VIEW collectives AS SELECT * FROM read_parquet('{a.out}/collectives.parquet')")
    n_steps = db.execute("SELECT count(*), count(DISTINCT job) FROM steps").fetchone()
    n_coll = db.execute("SELECT count(*) FROM collectives").fetchone()[0]
    t2 = time.perf_counter()
    rows = db.execute(QUERY).fetchall()
    t3 = time.perf_counter()
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in ("steps.parquet", "collectives.parquet"))
    print(f"{n_steps[1]} jobs, {n_steps[0]} rank-steps, {n_coll} collective rows; Parquet {size / 1e6:.1f} MB; "
          f"CSV -> Parquet {t1 - t0:.2f} s, query {t3 - t2:.2f} s (duckdb {duckdb.__version__}, "
          f"{db.execute('SELECT current_setting(' + chr(39) + 'threads' + chr(39) + ')').fetchone()[0]} threads)")
    print("job\tstraggler\tsaving_us_per_step\tcritical_exposed_us_per_step\tmedian_step_us")
    for r in rows[:5]:
        print("\t".join(str(round(v, 3)) if isinstance(v, float) else str(v) for v in r))
    if len(rows) > 5:
        print(f"... {len(rows) - 5} more jobs")


if __name__ == "__main__":
    main()
