/* Private to the hand parser of the trace reader (reader_hand.c, reader_hand_step.c): what
 * its two files share. reader_hand.c reads values (strings, numbers, containers, the attr
 * shortcut) from the input window; reader_hand_step.c owns the window and the steps of the
 * top-level state machine (the '{', a top-level member, a node), undoing and redoing a step
 * that runs off the end of the window.
 */
#ifndef ETR_JSON_READER_HAND_H
#define ETR_JSON_READER_HAND_H

#include "json/reader_int.h"

/* H_BIG: the step needs more memory than r->limit (its text, or the values it builds);
 * H_MISS: a fast path does not apply, nothing was done (h_attr) */
enum { H_OK = 0, H_MORE = 1, H_ERR = 2, H_BIG = 3, H_MISS = 4 };
#define H_MAX_DEPTH 1024
/* Zero bytes kept after the window's data (hb[hb_len..hb_len + H_PAD)): a NUL stops every
 * scanning loop at the end (it is not whitespace, a digit or a plain string byte), so the
 * loops need no bounds check, and the string scanner may load 16 bytes from any position up
 * to the end. Whatever stops at the end then checks p >= end and asks for more input. */
#define H_PAD 64

/* An "invalid JSON (what)" error at byte `at` of the window; H_ERR. */
int etr__rd_h_fail(rd_reader *r, const unsigned char *at, const char *what);

/* The first byte at or after p that is not JSON whitespace (the NUL after the window ends it:
 * H_PAD). */
static inline const unsigned char *h_ws(const unsigned char *p, const unsigned char *end) {
  (void)end; /* the NUL after the window stops the loop (H_PAD) */
  while (*p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

/* A string (*pp at its opening quote) into arena a, NUL-terminated: H_OK and *pp after it,
 * or H_MORE / H_ERR. A node's plain strings are left in place in the window (a == &r->nodes;
 * reader_hand.c says how). */
int etr__rd_h_string(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                     const char **s, size_t *len);
/* Any JSON value at *pp into *v, its strings and containers in arena a; depth: containers
 * open around it. H_OK and *pp after it, or H_MORE / H_ERR / H_BIG. */
int etr__rd_h_value(rd_reader *r, const unsigned char **pp, const unsigned char *end, arena *a,
                    int depth, rd_jval *v);

#endif /* ETR_JSON_READER_HAND_H */
