/* Private to `etr repair` (tools/cmd_repair.c, repair_raw.c, repair_add.c): its state and
 * what each file provides.
 *
 * Split by responsibility: repair_raw.c is the raw stream, the input's bytes copied to the
 * output unchanged (through the reader's byte source) while the reader parses the same
 * input; repair_add.c notes what each kept node names and writes what repair adds
 * (placeholders, thread and process nodes, the footer); cmd_repair.c is the command
 * (options, the two streams side by side, the report). Single-threaded.
 */
#ifndef ETR_TOOLS_REPAIR_H
#define ETR_TOOLS_REPAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json/reader.h"
#include "lib_an_util.h"

#define PROCESS_NAME "[pytorch|profiler|execution_trace|process]"
#define THREAD_NAME "[pytorch|profiler|execution_trace|thread]"
#define PLACEHOLDER_NAME "[etr|repair|unfinished]"
#define RAW_BLOCK (64u << 10)   /* bytes read / inflated at once by the raw stream */
#define MAX_TB_TABLE (1u << 24) /* largest empty tracebacks table written for lost frames */

#ifndef ETR_TOOL_VERSION
#define ETR_TOOL_VERSION "unknown"
#endif

/* ---- the raw stream (repair_raw.c) ---- */

/* The input's bytes, decompressed as the reader decompresses them: read through the reader's
 * own byte source (json/reader.h, rd_source), with pread from `fd` so that it never disturbs
 * the reader's file offset. How the source says the input ended (a cut or corrupt gzip or
 * zstd stream) is where the raw stream stops, `stop` saying why; the bytes decompressed
 * before that point are copied. */
typedef struct rawsrc {
  int fd;
  uint64_t base; /* file offset of the input's first byte */
  rd_source *src;
  const unsigned char *buf; /* the source's current block */
  size_t len, pos;
  uint64_t off; /* offset of buf[0] in the (decompressed) input */
  bool eof;
  const char *stop; /* why the raw stream ended early (corrupt or cut gzip), or NULL */
  int err;          /* errno of a read error, 0 if none */
} rawsrc;

/* Offset of the raw stream's next byte in the (decompressed) input. */
uint64_t rp_raw_at(const rawsrc *s);
/* Copies the input up to offset `to` (or the end) to o (NULL: skips). Returns the offset
 * reached, or UINT64_MAX after a read error. */
uint64_t rp_raw_copy(rawsrc *s, an_out *o, uint64_t to);
/* Copies the JSON object starting at the current byte (a '{') to o: the offset just past its
 * '}', 0 when there is none there, UINT64_MAX after a read error. */
uint64_t rp_raw_copy_object(rawsrc *s, an_out *o);
/* Copies the header (up to and including the '[' of "nodes") to o: the offset after it, 0
 * when there is none, UINT64_MAX after a read error. */
uint64_t rp_raw_copy_header(rawsrc *s, an_out *o);
void rp_raw_free(rawsrc *s);
/* The fd the raw stream reads for an input open on in_fd (a pipe is spooled to a temporary
 * file first, then put on stdin for the reader: *spooled); -1 after printing the error. */
int rp_raw_source(int in_fd, const char *file, uint64_t *base, bool *spooled);

/* ---- what repair notes and adds (repair_add.c) ---- */

/* A set of ids: 512-bit (64-byte) bitmap pages, only where ids occur, allocated in slabs
 * of 256 pages. Dense ids (a counter shared with tensor ids) cost about 1.5 bits an id;
 * scattered ones at worst a page and its index slots (~150 bytes) each. */
#define PAGE_BITS 9
#define PAGE_WORDS ((1u << PAGE_BITS) / 64)
#define SLAB_PAGES 256u
typedef struct idset {
  an_u64map index; /* id >> PAGE_BITS -> page number */
  uint64_t **slabs;
  size_t n_pages, n_slabs;
} idset;

/* A parent named by a kept node but not read (yet). */
typedef struct pend {
  uint64_t id, tid;
  int64_t ts_min, end_max; /* span of its timed children, when `timed` */
  bool timed, live;
  size_t next_free;
} pend;

typedef struct repair {
  const char *file; /* as messages give it */
  const char *out_path;
  an_out o;
  rd_reader *r;
  rawsrc raw;
  bool strides; /* schema >= 1.1.1: empty inputs/outputs carry "strides" */
  /* what was read */
  uint64_t kept, last_end;
  bool any_node_out; /* a node is in the output (for the separator) */
  bool have_process;
  /* The process node, held back while it may be the last node: the placeholders go before
   * it, so that it stays last (docs/FORMAT.md). Its text with the separator before it. */
  an_out held;
  uint64_t held_at; /* the output's size when it was held */
  idset seen;
  an_u64map threads; /* tid -> thread node id */
  an_u64map pend_ix; /* id -> index in pends */
  pend *pends;
  size_t n_pends, cap_pends, free_head; /* free list through next_free; SIZE_MAX ends */
  uint64_t max_id;                      /* the largest id a kept node has or names as its parent */
  bool timed_any;
  int64_t end_us_max;
  uint64_t tb_nodes, tb_max;
  /* The traceback tables the recorder kept beside the trace (`FILE.tables`, when the trace
   * was cut before its footer): their elements, and how many tracebacks they hold. */
  char *side_frames, *side_tbs;
  size_t side_frames_len, side_tbs_len;
  uint64_t side_n_tbs;
  bool side;
  uint64_t tb_unresolved; /* nodes whose traceback the tables beside do not hold */
  /* what was added */
  uint64_t placeholders, threads_added;
  bool process_added;
  uint64_t tracebacks_lost;
  int64_t finish_ts;
  /* the outcome */
  bool intact;
  bool intact_fixed; /* complete, but placeholders were added for nodes it names */
  uint64_t input_bytes, dropped;
  const char *reason; /* why the input stops (NULL when intact) */
  uint64_t reason_at;
  char why[600];
} repair;

/* Reads `path`.tables when it is the recorder's tables of this trace (its header's pid and
 * start_ts); false when there is none (or it is another trace's). */
bool rp_read_side_tables(repair *w, const char *path, int64_t pid, int64_t start_ts);
/* Write the held process node (if any) with the separator the output needs. */
void rp_flush_held(repair *w);
void rp_side_tables_free(repair *w);

/* Notes kept node n (its id, parent, fw_parent, thread, timing, traceback); false when
 * memory ran out. */
bool rp_note_node(repair *w, const rd_rnode *n);
/* Parents and fw_parents named but not read: the placeholders rp_add_nodes would write. */
size_t rp_live_pends(const repair *w);
/* Writes the placeholders, thread nodes and process node the kept nodes need; false when
 * memory ran out. */
bool rp_add_nodes(repair *w);
/* Closes "nodes" and writes the footer: finish_ts, tables, "etr" with its "repair" member. */
void rp_put_footer(repair *w);
void rp_idset_free(idset *s);

/* `etr repair` (cmd_repair) with its argv, OUT gzip-compressed when gzip: etr convert
 * completes a cut log into OUT.gz that way, its temporary files about the output's size. */
int cli_repair(int argc, char **argv, bool gzip);

#endif /* ETR_TOOLS_REPAIR_H */
