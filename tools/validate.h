/* Private to `etr validate` (tools/cmd_validate.c, validate_node.c, validate_file.c): the
 * problems it reports, its state, and the checks each file provides.
 *
 * The command is split by when a check can run: validate_node.c checks each node as it
 * streams by (keys, types, attrs, inputs/outputs and their values); validate_tree.c checks
 * ids, parents and the tree as nodes stream by, in memory bounded whatever their number;
 * validate_file.c runs what needs the whole file after the last node (top-level keys,
 * traceback tables, footer); cmd_validate.c is the command (options, the reader,
 * reporting). Single-threaded.
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
  uint64_t listed[2][K_COUNT]; /* printed */
  uint64_t errors, warnings;
  const rd_rheader *hdr;
  bool has_strides_schema; /* schema >= 1.1.1 */
} vstate;

/* One problem: counted, and printed (up to --max of its kind) unless --quiet. */
void vd_problem(vstate *v, sev s, kind k, uint64_t off, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* n more problems of kind k, counted but not listed (the tree names the first few nodes of
 * a kind of problem, and counts the others). */
void vd_unlisted(vstate *v, sev s, kind k, uint64_t n);

/* ---- the tree (validate_tree.c) ---- */

enum { NK_OP = 0, NK_THREAD = 1, NK_PROCESS = 2 };

/* What the tree checks keep: bounded, whatever the number of nodes (validate_tree.c). */
typedef struct vtree vtree;

/* ---- the run ---- */

typedef struct vrun {
  vstate v;
  vtree *tree;
  uint64_t nodes, ops, threads;
  uint64_t placeholders; /* nodes "[etr|...|unfinished]": added for ops never written */
  bool have_process;
  uint64_t max_tb;
  int64_t max_tb_node;
  uint64_t max_tb_off;
  bool any_tb;
} vrun;

/* Per node, as it streams by (validate_node.c). */
void vd_check_node(vrun *w, const rd_rnode *n);

/* The tree (validate_tree.c): vd_tree_init allocates its fixed part (0, or -1 when out of
 * memory); vd_tree_node takes each node with an id, of kind NK_*, as it streams by;
 * vd_tree_finish reports what is still unresolved after the last node (end_off: where
 * problems of the whole file are reported); vd_tree_unchecked writes into buf what the
 * memory bounds left unchecked and returns true, or returns false when nothing was. */
int vd_tree_init(vrun *w);
void vd_tree_node(vrun *w, const rd_rnode *n, int kind);
void vd_tree_finish(vrun *w, uint64_t end_off);
bool vd_tree_unchecked(const vrun *w, char *buf, size_t size);
void vd_tree_free(vrun *w);

/* After the last node (validate_file.c); end_off is the offset problems of the whole file
 * are reported at. */
void vd_check_top(vstate *v, rd_reader *r, uint64_t end_off);
void vd_check_trailer(vrun *w, rd_reader *r, uint64_t end_off);

#endif /* ETR_TOOLS_VALIDATE_H */
