/* Private to `etr validate` (tools/cmd_validate.c, validate_node.c, validate_file.c): the
 * problems it reports, its state, and the checks each file provides.
 *
 * The command is split by when a check can run: validate_node.c checks each node as it
 * streams by (keys, types, attrs, inputs/outputs and their values) and keeps ~32 bytes of it
 * in the id table; validate_file.c holds that table and runs what needs the whole file after
 * the last node (ids, parents and the tree, top-level keys, traceback tables, footer);
 * cmd_validate.c is the command (options, the reader, reporting). Single-threaded.
 */
#ifndef ETR_TOOLS_VALIDATE_H
#define ETR_TOOLS_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json/reader.h"

#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"

/* ---- problems ---- */

typedef enum sev { SEV_WARN = 0, SEV_ERROR = 1 } sev;

/* Kinds of problem: each is listed up to --max times, then only counted. */
#define KINDS(X)                           \
  X(K_TOP, "top-level keys")               \
  X(K_HEADER, "header values")             \
  X(K_KEYS, "node keys")                   \
  X(K_FIELD, "node fields")                \
  X(K_TIMING, "timing")                    \
  X(K_ATTR, "attrs")                       \
  X(K_BASE, "base attrs")                  \
  X(K_IO, "inputs/outputs")                \
  X(K_VALUE, "values")                     \
  X(K_DUPID, "duplicate ids")              \
  X(K_PARENT, "parents")                   \
  X(K_REACH, "ops reaching their thread")  \
  X(K_SPECIAL, "process and thread nodes") \
  X(K_TB, "tracebacks")                    \
  X(K_FOOTER, "footer")                    \
  X(K_READER, "reader warnings")

typedef enum kind {
#define X(k, s) k,
  KINDS(X)
#undef X
      K_COUNT
} kind;

typedef struct vstate {
  const char *file;
  bool strict, quiet;
  uint64_t max_per_kind;
  uint64_t count[2][K_COUNT];
  uint64_t errors, warnings;
  const rd_rheader *hdr;
  bool has_strides_schema; /* schema >= 1.1.1 */
} vstate;

/* One problem: counted, and printed (up to --max of its kind) unless --quiet. */
void vd_problem(vstate *v, sev s, kind k, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* ---- the id table (validate_file.c) ----
 * Dense per-node records in blocks, and an open-addressing index. */

enum { NK_OP = 0, NK_THREAD = 1, NK_PROCESS = 2 };
enum { ST_NONE = 0, ST_BUSY = 1, ST_OK = 2, ST_BAD = 3 };

/* 32 bytes a node (a 1 GB trace of ~1.2M nodes needs ~38 MB, plus 4 bytes a slot of index) */
typedef struct nrec {
  int64_t id;
  int64_t parent;       /* parent id; after check_tree pass 1 an index (the thread node's
                           index once resolved), or -1 */
  uint64_t offset : 44; /* byte offset of the node (up to 16 TB) */
  uint64_t kind : 2;    /* NK_* */
  uint64_t state : 2;   /* ST_* */
  uint64_t tid;         /* the tid attr, whole (PyTorch writes OS thread ids) */
} nrec;

#define BLK_SHIFT 16
#define BLK_SIZE (1u << BLK_SHIFT)

typedef struct idtab {
  nrec **blocks;
  size_t n_blocks, n;
  uint32_t *slots; /* index + 1, 0 = empty */
  size_t mask;     /* slots - 1 */
} idtab;

/* Adds a record for id; returns it, or NULL when out of memory. *dup is set when id was
 * there (the record returned is then the first one's). */
nrec *vd_tab_add(idtab *t, int64_t id, bool *dup);
void vd_tab_free(idtab *t);

/* ---- the run ---- */

/* A node's fw_parent, checked once every id is known (only nodes that have one). */
typedef struct fwref {
  int64_t id, fw_parent;
  uint64_t offset;
} fwref;

typedef struct vrun {
  vstate v;
  idtab ids;
  fwref *fw; /* fw_parent references to check at the end */
  size_t n_fw, cap_fw;
  bool fw_oom;
  uint64_t nodes, ops, threads;
  bool have_process;
  uint64_t max_tb;
  int64_t max_tb_node;
  uint64_t max_tb_off;
  bool any_tb;
} vrun;

/* Per node, as it streams by (validate_node.c). */
void vd_check_node(vrun *w, const rd_rnode *n);

/* After the last node (validate_file.c); end_off is the offset problems of the whole file
 * are reported at. */
void vd_check_tree(vrun *w, uint64_t end_off);
void vd_check_top(vstate *v, rd_reader *r, uint64_t end_off);
void vd_check_trailer(vrun *w, rd_reader *r, uint64_t end_off);

#endif /* ETR_TOOLS_VALIDATE_H */
