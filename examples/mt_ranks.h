/* mt_ranks.h — the example runtime as N processes, one rank each (etr-example-runtime
 * --ranks N): a launcher that starts the ranks the way torchrun does (RANK / WORLD_SIZE in
 * their environment, each its own exec'd process), and the "network" between them: a full
 * mesh of socketpairs over which the collectives exchange real data. */
#ifndef MT_RANKS_H
#define MT_RANKS_H

#include <stdint.h>

/* The environment variable that hands a rank its sockets: one fd per peer ("-1" for itself). */
#define MT_PEER_FDS_ENV "MINITENSOR_PEER_FDS"
#define MT_MAX_RANKS 16

typedef struct mt_mesh {
  int rank, size;
  int fds[MT_MAX_RANKS]; /* fds[j]: the socket to rank j; -1 for this rank */
} mt_mesh;

/* Start `n` copies of this program (argv as given, without the launcher's own options) as
 * ranks 0..n-1 and wait for all of them. Returns the exit status: 0 when every rank exited
 * 0, else 1 (each failed rank is named on stderr). */
int mt_launch(int n, char **argv);

/* In a rank started by mt_launch: fill *m from the environment and return 1; 0 when this
 * process was not started by mt_launch. Exits with a message on a malformed environment. */
int mt_mesh_from_env(mt_mesh *m);

/* Sum n floats over all ranks, in place (every rank gets the same sum: rank order). */
void mt_mesh_allreduce(mt_mesh *m, float *data, int64_t n);

/* Rank r sends in[j*k .. j*k+k) to rank j and receives out[j*k ..) from rank j. */
void mt_mesh_alltoall(mt_mesh *m, const float *in, float *out, int64_t k);

void mt_mesh_close(mt_mesh *m);

#endif /* MT_RANKS_H */
