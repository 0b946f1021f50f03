// Data-parallel processes: who this process is (rank, world, local rank, from the launcher's
// environment), a TCP rendezvous through rank 0, and the few collectives the host needs: a
// broadcast from rank 0 (the NCCL unique id), a barrier, and, for the CPU backend, a mean
// all-reduce whose sum runs in rank order on rank 0 (deterministic).
//
// Environment, in order of preference:
//   OpenMPI (mpirun):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   torchrun / stg launch:  RANK, WORLD_SIZE, LOCAL_RANK
//   Slurm (srun):  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (both of the first two set; a one-task
//                  job is not a launch)
// and MASTER_ADDR (default 127.0.0.1; under Slurm alone the first host of SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST), MASTER_PORT (default 29500; under Slurm alone 20000 + SLURM_JOB_ID mod 20000)
// for the rendezvous; rank 0 listens there. Slurm's variables beside a launcher's must describe the
// same process, or a launcher started inside each Slurm task (docs/DISTRIBUTED.md); else an error. STG_DIST_TIMEOUT (seconds, default 120) bounds every wait for another rank: a
// rank that dies or hangs makes the others fail with a message instead of hanging.
#ifndef STG_DIST_H
#define STG_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "graph/graph.h"

typedef struct rt_dist {
    int rank, world, local_rank;
    char addr[256];
    int port;
    double timeout_s;
    const char *source;  // which variables said so ("OMPI_COMM_WORLD_*", "RANK/WORLD_SIZE", "SLURM_*", "none")
    int *fd;             // rank 0: (world) sockets to every other rank (fd[0] unused); others: fd[0] to rank 0
    bool connected;
} rt_dist;

// Fills d from the environment; world 1, rank 0 when no launcher variables are set. Checks the
// values (rank < world, port range) and says which variable is wrong.
int rt_dist_from_env(rt_dist *d, stg_err *err);
// Whether the environment names a launch with several processes (or one, under a launcher).
bool rt_dist_launched(void);
// The first host of a Slurm node list in its compressed form ("node[03-05,07],gpu1" -> "node03",
// "rack[1-2]-n[08-09]" -> "rack1-n08"), into out (n bytes).
int rt_dist_first_host(const char *list, char *out, size_t n, stg_err *err);
// The rendezvous: rank 0 accepts world - 1 connections, the others connect (retrying until the
// timeout). Each rank says who it is; rank 0 checks that every rank came once with the same world.
int rt_dist_connect(rt_dist *d, stg_err *err);
void rt_dist_close(rt_dist *d);

int rt_dist_bcast(rt_dist *d, void *buf, size_t n, stg_err *err);
// From rank `root` to every rank (through rank 0 when root is another rank).
int rt_dist_bcast_root(rt_dist *d, void *buf, size_t n, int root, stg_err *err);
int rt_dist_barrier(rt_dist *d, stg_err *err);
// Point to point with rank 0: rank `from` sends n bytes, rank 0 receives them (both call it; other
// ranks return at once).
int rt_dist_to_root(rt_dist *d, void *buf, size_t n, int from, stg_err *err);
// In place: every rank ends with the mean over ranks of buf (n elements of dtype f32, f64 or
// bf16), summed in double on rank 0 in rank order.
// Right after the rendezvous, before any collective of the step: every rank gives a description of
// what it runs ("key=value" lines: the model, its dims, the options that change the step); rank 0
// compares them and every rank fails at once, naming the first line that differs, when one rank's
// differs. Ranks launched with different models would otherwise wait out the timeout in their
// first all-reduce. At most RT_DIST_DESC_MAX - 1 bytes are compared.
#define RT_DIST_DESC_MAX 8192
int rt_dist_agree(rt_dist *d, const char *desc, stg_err *err);

int rt_dist_allreduce_mean(rt_dist *d, void *buf, int64_t n, stg_dtype dt, stg_err *err);

#endif
