/* Small building blocks shared by the analysis subcommands (chrome, graph, replay, flame):
 * a uint64 -> uint64 hash map, a string interning table, and an output stream that writes
 * valid JSON strings whatever the bytes (invalid UTF-8 replaced, control bytes escaped).
 *
 * Internal to the etr command; not thread-safe (one command runs on one thread).
 * Allocation failures are reported by return values (false / -1), never by aborting.
 */
#ifndef ETR_TOOLS_LIB_AN_UTIL_H
#define ETR_TOOLS_LIB_AN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "json/reader.h"

/* ---- uint64 -> uint64 open-addressing hash map (16 bytes per slot, load <= 1/2) ---- */

typedef struct an_u64map {
  uint64_t *keys;
  uint64_t *vals;
  size_t cap; /* power of two or 0 */
  size_t n;
  bool has_max; /* the key UINT64_MAX (our empty marker) is kept aside */
  uint64_t max_val;
} an_u64map;

/* Put (insert or overwrite). false when memory ran out. */
bool an_u64map_put(an_u64map *m, uint64_t key, uint64_t val);
/* Lookup: true and *val when present. */
bool an_u64map_get(const an_u64map *m, uint64_t key, uint64_t *val);
/* Remove a key (no-op when absent). */
void an_u64map_del(an_u64map *m, uint64_t key);
void an_u64map_free(an_u64map *m);

/* ---- string interning: each distinct byte string gets a small index ---- */

typedef struct an_strtab {
  char **strs; /* NUL-terminated copies */
  size_t *lens;
  size_t n, cap;
  an_u64map index; /* hash -> first index with that hash (chained via `next`) */
  uint32_t *next;  /* next index with the same hash, UINT32_MAX ends */
} an_strtab;

/* Index of s (interned on first use), or UINT32_MAX when memory ran out. */
uint32_t an_strtab_intern(an_strtab *t, const char *s, size_t len);
void an_strtab_free(an_strtab *t);

/* ---- output: buffered, JSON-aware ---- */

typedef struct an_out {
  FILE *f;        /* NULL: the output goes to mem (a growable buffer the caller frees) */
  bool failed;    /* a write failed (disk full, closed pipe, memory exhausted) */
  uint64_t bytes; /* bytes written so far (for output limits) */
  char *mem;
  size_t mem_len, mem_cap;
} an_out;

void an_out_raw_any(an_out *o, const char *s, size_t len);
/* Append len bytes. A memory output with room takes them inline (chrome's slices are many
 * small pieces); the rest goes through an_out_raw_any. */
static inline void an_out_raw(an_out *o, const char *s, size_t len) {
  if (!o->f && o->mem_len + len <= o->mem_cap) {
    memcpy(o->mem + o->mem_len, s, len);
    o->mem_len += len;
    o->bytes += len;
    return;
  }
  an_out_raw_any(o, s, len);
}
void an_out_cstr(an_out *o, const char *s);
/* A string literal, its length known at compile time. */
#define AN_OUT_LIT(o, lit) an_out_raw((o), (lit), sizeof(lit) - 1)
/* Integers in decimal, without printf (the hot paths of chrome and friends). */
void an_out_u64(an_out *o, uint64_t v);
void an_out_i64(an_out *o, int64_t v);
void an_out_fmt(an_out *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A JSON string literal with quotes: escapes '"', '\\' and control characters, replaces
 * each invalid UTF-8 sequence with U+FFFD. */
void an_out_jstr(an_out *o, const char *s, size_t len);
/* A JSON value (compact): finite doubles as etr__fmt_double writes them (the trace's Values
 * rule: 1.0 stays a double; chrome_out.c writes the same), others as strings. */
void an_out_jval(an_out *o, const rd_jval *v);
/* Write s with invalid UTF-8 replaced (U+FFFD), control characters (C0, DEL and C1) replaced
 * by spaces and
 * every byte in `bad` replaced by `repl` — for text formats (folded stacks, DOT, reports). */
void an_out_sanitized(an_out *o, const char *s, size_t len, const char *bad, char repl);
/* an_out_sanitized of the first `max` bytes of s at most (cut back to a character's start),
 * then "..." when it was cut: names in human reports, cut as cli_term cuts (CLI_TERM_MAX). */
void an_out_sanitized_cut(an_out *o, const char *s, size_t len, size_t max, const char *bad,
                          char repl);

/* ---- growable arrays ---- */

/* Make room for `need` elements of `elem` bytes in the array *p of capacity *cap (both
 * updated; the capacity doubles, from 16). false, the array untouched, when memory ran out. */
bool an_grow(void **p, size_t *cap, size_t need, size_t elem);

/* ---- trace helpers ---- */

/* The node is a thread / process node (by its name). */
bool an_is_thread_node(const rd_rnode *n);
bool an_is_process_node(const rd_rnode *n);

/* Attr by name, or NULL. */
const rd_rattr *an_attr(const rd_rnode *n, const char *name);

/* Integer value of a jval (INT, UINT clamped, DOUBLE truncated), or `dflt`. */
int64_t an_jint(const rd_jval *v, int64_t dflt);
/* Whether v is a tensor value as the format writes one ([id, storage, offset, numel,
 * itemsize, device]); an integer value as uint64 (0 for another kind). */
bool an_is_tensor_value(const rd_jval *v);
uint64_t an_ju64(const rd_jval *v);

/* Parse a double / a positive integer option argument; false on a bad number. */
bool an_parse_double(const char *s, double *out);

/* A trace's rank among several given together, and group "0"'s size its process-group node
 * records. */
typedef struct an_rank_given {
  int64_t rank;  /* distinct among the traces (the caller's check) */
  int64_t world; /* -1: none recorded */
  bool by_pos;   /* the trace records no rank: its position among the arguments */
} an_rank_given;

/* Traces that record their world size should be that many, ranks 0..size-1, all of one
 * size: else the set is partial (a rank missing) or mixes runs, which a simulator would take
 * for some other run (docs/CLI.md). Traces that record no size are taken as they are. True,
 * with one line saying what is wrong in note (cap bytes; files[i] is r[i]'s), when the set
 * is not a whole run's: etr chakra refuses it, summary notes it, replay refuses it. */
bool an_world_note(char *note, size_t cap, const char *const *files, const an_rank_given *r,
                   size_t n);

#endif /* ETR_TOOLS_LIB_AN_UTIL_H */
