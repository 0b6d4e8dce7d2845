/* etr/dist.h — ranks and process groups of a distributed run.
 *
 * A process is one rank of a run of world_size ranks. By default both come from the
 * environment as launchers set it (RANK and WORLD_SIZE; else OMPI_COMM_WORLD_RANK/_SIZE,
 * PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS; else rank 0 of 1); etr_dist_set_rank
 * overrides them. `%r` in ETR_TRACE expands to the rank (the environment's: the file is named
 * when the library loads).
 *
 * The runtime declares each process group when it creates one. The trace carries them the
 * way PyTorch does: an op node named `## process_group:init ##` whose single String input is
 * a JSON list of {pg_name, pg_desc, backend_config, ranks, group_size, group_count} (plus
 * etr's "rank" key; docs/FORMAT.md). The default group "0" (every rank, "default_pg") is
 * always in the list unless the runtime declares a group named "0" itself. The node is
 * recorded when ETR_TRACE enables a trace, on every etr_dist_declare_group and
 * etr_dist_set_rank, and whenever the runtime calls etr_dist_record_groups (do that right
 * after enabling a trace you opened yourself). Each node lists every group declared so far.
 * PARAM's comm replay reads only the first such node in the file: until the trace's first
 * collective the trace's writer holds these nodes back and writes them, newest first, right
 * before it (at most 64 of them: docs/FORMAT.md).
 *
 *   etr_dist_set_rank(rank, world);
 *   etr_process_group pg = ETR_PROCESS_GROUP_INIT;
 *   pg.name = "0"; pg.desc = "default_pg"; pg.backend = "cpu:gloo";
 *   etr_dist_declare_group(&pg);
 *   ... collectives name their group in etr_collective_info.pg_name ...
 *
 * Threads: every function may be called from any thread; they take one mutex of their own
 * (never the registry lock while recording) and allocate.
 */
#ifndef ETR_DIST_H
#define ETR_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "etr/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many groups are kept (a further declaration returns ETR_ENOSPC). */
#define ETR_DIST_MAX_GROUPS 1024

/* One process group. Start from ETR_PROCESS_GROUP_INIT. Strings and the rank array are
 * copied by etr_dist_declare_group. */
typedef struct etr_process_group {
  size_t struct_size;   /* sizeof(etr_process_group) */
  const char *name;     /* pg_name, PyTorch numbers them "0", "1", ...; required */
  const char *desc;     /* pg_desc ("default_pg", "my_subgroup"); NULL = "" */
  const char *backend;  /* backend_config ("cuda:nccl", "cpu:gloo"); NULL = "" */
  const int64_t *ranks; /* global ranks of the members, in group-rank order */
  uint32_t n_ranks;     /* 0 (ranks NULL) = every rank of the world */
  int64_t size;         /* group_size; 0 = n_ranks, or the world size when n_ranks is 0 */
} etr_process_group;
#define ETR_PROCESS_GROUP_INIT \
  { sizeof(etr_process_group), NULL, NULL, NULL, NULL, 0, 0 }

/* Set this process's rank and the world size. ETR_EINVAL unless 0 <= rank < world_size.
 * Records the process-group node when a trace is enabled (the world group's size and the
 * "rank" keys change). */
ETR_API int etr_dist_set_rank(int64_t rank, int64_t world_size);

/* This process's rank / the world size (the environment's until etr_dist_set_rank). */
ETR_API int64_t etr_dist_rank(void);
ETR_API int64_t etr_dist_world_size(void);

/* Declare a process group; a group with the same name replaces the earlier one. ETR_EINVAL
 * for a NULL or empty name, a member rank < 0, or a struct_size smaller than any header's
 * (0 included); ETR_ENOSPC after
 * ETR_DIST_MAX_GROUPS groups; ETR_ENOMEM. Then records the process-group node. */
ETR_API int etr_dist_declare_group(const etr_process_group *pg);

/* Record the `## process_group:init ##` node now, on the calling thread (nothing happens
 * while no observer is enabled). 0, or ETR_ENOMEM. */
ETR_API int etr_dist_record_groups(void);

/* The JSON list the node carries, NUL-terminated, into buf (cap bytes). Returns its length
 * (without the NUL); when that is >= cap the text was cut (call again with a larger buf).
 * buf NULL: the length only, whatever cap is. */
ETR_API size_t etr_dist_groups_json(char *buf, size_t cap);

/* Which declared group a collective used, for a runtime that knows only the group's size
 * and this process's rank in it (PyTorch 1.x's c10d ops): the groups of `size` members
 * that hold this process at group rank `group_rank` (the world group "0" included when it
 * is not declared: the world size, this process's rank). Returns how many there are, and
 * writes the name of the one into name[0..cap) (cut, NUL-terminated; "" otherwise) when
 * there is exactly one. Takes the module's mutex. */
ETR_API uint32_t etr_dist_group_of(int64_t size, int64_t group_rank, char *name, size_t cap);

/* Forget every declared group and the rank set by etr_dist_set_rank (tests). */
ETR_API void etr_dist_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* ETR_DIST_H */
