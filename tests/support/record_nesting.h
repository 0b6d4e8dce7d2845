/* tests/support/record_nesting.h — what the stress tests' observers check on each recording
 * thread (tests/registry/test_registry_stress.c, tests/reliability/stress.c): record
 * callbacks nest, every exit being for the innermost record entered and not yet exited.
 *
 * One rec_nesting per observer and recording thread, written by that thread only (the
 * callbacks run on the recording thread); read by the test once the threads are joined.
 * Header-only: static inline functions, no allocation.
 */
#ifndef ETR_TESTS_SUPPORT_RECORD_NESTING_H
#define ETR_TESTS_SUPPORT_RECORD_NESTING_H

#include <stdint.h>

#include <etr/etr.h>

/* Deeper nesting than the tests record counts as a violation. */
#define REC_NESTING_MAX 8

typedef struct rec_nesting {
  uint64_t enters, exits, violations;
  const etr_record *stack[REC_NESTING_MAX]; /* the records entered and not yet exited */
  int depth;
} rec_nesting;

/* An enter callback for rec. */
static inline void rec_nesting_enter(rec_nesting *p, const etr_record *rec) {
  p->enters++;
  if (p->depth < REC_NESTING_MAX)
    p->stack[p->depth++] = rec;
  else
    p->violations++;
}

/* An exit callback for rec: a violation unless rec is the innermost open record. */
static inline void rec_nesting_exit(rec_nesting *p, const etr_record *rec) {
  p->exits++;
  if (p->depth == 0) {
    p->violations++; /* an exit without an enter */
    return;
  }
  if (p->stack[p->depth - 1] != rec) p->violations++; /* the exit of another record */
  p->depth--;
}

#endif /* ETR_TESTS_SUPPORT_RECORD_NESTING_H */
