/* The trace's traceback tables, kept by the writer thread: each unique traceback gets an
 * index (the node's "traceback" attr) when its node is written; a new stack's addresses are
 * symbolized then (each once), so the index is that of its frame sequence: tracebacks that
 * read the same share it. Written after "finish_ts" as "frames" (each unique {name,
 * filename, line} once) and "tracebacks" (frame indices, innermost first, each once).
 * Both together stay small enough for etr's reader to read back (tbtable.c, "Bounded
 * tables"): a new traceback that would pass that bound is left out, its ops carry none.
 *
 * Used by the writer thread only: no locks.
 */
#ifndef ETR_OBSERVER_TBTABLE_H
#define ETR_OBSERVER_TBTABLE_H

#include <stdint.h>

#include "etr/traceback.h"
#include "json/writer.h"

typedef struct etr__tbtab etr__tbtab;

/* NULL when memory runs out. */
etr__tbtab *etr__tbtab_new(etr_symbolize_mode mode);
/* NULL is a no-op. Its symbolizer's answers serve the next trace
 * (etr__symbolizer_give_back). */
void etr__tbtab_free(etr__tbtab *t);

/* Index of the traceback made of these frame words (native return addresses of module
 * generation gen, or ETR__SCRIPT_TAG | script frame id), innermost first; a new index when
 * the sequence is new. UINT64_MAX when memory runs out or when the sequence is left out of
 * the full tables (then always: the same words get the same answer). */
uint64_t etr__tbtab_intern(etr__tbtab *t, uint64_t gen, const uint64_t *words, uint32_t n);

/* Symbolize the frames first seen since the last call. */
void etr__tbtab_symbolize(etr__tbtab *t);

/* Write `"frames": [...], "tracebacks": [...], ` (symbolizing what is left first). */
void etr__tbtab_emit(etr__tbtab *t, etr__jw *w);

/* The frames and tracebacks made since the last call, as the JSON elements of the two tables
 * (comma-separated, no brackets) appended to frames and tbs; how many of each in *n_frames
 * and *n_tbs. Their indices continue those written before (the binary log writes them as
 * they come, so a log cut short keeps them). */
void etr__tbtab_emit_new(etr__tbtab *t, etr__jw *frames, etr__jw *tbs, uint32_t *n_frames,
                         uint32_t *n_tbs);

/* The next etr__tbtab_emit_new starts again from the first entries (a file rewritten whole:
 * a flight recorder's dump). */
void etr__tbtab_rewind(etr__tbtab *t);

uint64_t etr__tbtab_tracebacks(const etr__tbtab *t);
uint64_t etr__tbtab_frames(const etr__tbtab *t); /* entries of the "frames" table so far */
/* Distinct stacks (sequences of frame words) left out because the tables were full. */
uint64_t etr__tbtab_cut(const etr__tbtab *t);
/* What the writer keeps to find those (tests): distinct (module record, frame word) sites
 * and distinct sequences of them; neither grows when an unchanged library is reloaded. */
void etr__tbtab_kept(const etr__tbtab *t, uint64_t *sites, uint64_t *stacks);

#endif
