/* Internal declarations shared by the observer module's files (not installed). */
#ifndef ETR_OBSERVER_INTERNAL_H
#define ETR_OBSERVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "etr/common.h"

#include <limits.h>
#include <pthread.h>
#include <time.h>

#if defined(__GNUC__)
#define ETR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ETR__PRINTF(a, b)
#endif

/* In a thread-key destructor of etr's: whether to keep the thread's state for a later round
 * of the key destructors (the key is set again), so that the host's own destructors, which
 * may run after ours in a round, still record through it. A destructor runs once per round
 * while its key holds a value, and POSIX guarantees PTHREAD_DESTRUCTOR_ITERATIONS rounds (at
 * least 4). The state is torn down in the round before the last: the sanitizers' runtimes
 * keep the last one for their own end of the thread (TSan's, run before ours in that round,
 * left etr's teardown without the thread's shadow state: a crash at every thread exit). */
#ifndef PTHREAD_DESTRUCTOR_ITERATIONS
#define PTHREAD_DESTRUCTOR_ITERATIONS 4
#endif
#define ETR__KEY_ROUNDS (PTHREAD_DESTRUCTOR_ITERATIONS - 1)
static inline bool etr__key_keep(pthread_key_t key, void *value, uint8_t *rounds) {
  return ++*rounds < ETR__KEY_ROUNDS && pthread_setspecific(key, value) == 0;
}

/* The name of the op node that lists the process groups (dist.c records it; the trace's
 * writer holds it back until the first collective, emit.c; docs/FORMAT.md). dist.c passes
 * etr__pg_init_name itself, so that the recorder knows its node by the name's address. */
#define ETR__PG_INIT_NAME "## process_group:init ##"
extern const char etr__pg_init_name[];

/* The largest per-thread buffer chunk, in KiB (64 MiB): the option buffer_kb
 * (etr_trace_open: ETR_EINVAL beyond) and ETR_TRACE_BUFFER_KB (env.c: ignored beyond). */
#define ETR__BUFFER_KB_MAX 65536u

/* A flight recorder's dump replaced the trace's file by a new one (dev:ino): the writer
 * mark ETR_TRACE_WRITER, when this process set it for that trace and it still holds what
 * was set, names the new file (env.c). Writer thread; not at a fatal signal. */
struct etr_trace;
void etr__env_file_replaced(const struct etr_trace *tr, unsigned long long dev,
                            unsigned long long ino);

/* Diagnostics through the log hook; never from a signal handler. */
void etr__log(etr_log_level level, const char *fmt, ...) ETR__PRINTF(2, 3);

/* Switch values of environment variables, in any case ("TRUE" and "Yes" are what a user
 * may write): on is 1, on, true, yes (and all); off is 0, off, false, no. */
bool etr__env_flag_on(const char *v);
bool etr__env_flag_off(const char *v);
/* An on/off variable (secure_getenv): unset or empty gives dflt; a value that is neither is
 * said on the log, never taken silently for one or the other, and gives dflt. */
bool etr__env_switch(const char *name, bool dflt);

/* A caller's option struct (in, whose first field is its struct_size) read into out, which
 * holds the defaults: the fields the caller's layout has are copied, those it lacks (an
 * older header) keep their defaults, and those past what this libetr knows (a newer header)
 * are ignored. False for a size below first_size, the struct's size in the first release
 * that had it: no header ever had that layout (docs/API.md, "Option structs"). */
static inline bool etr__options_in(void *out, size_t out_size, const void *in, size_t first_size) {
  size_t n;
  memcpy(&n, in, sizeof n);
  if (n < first_size) return false;
  memcpy(out, in, n < out_size ? n : out_size);
  memcpy(out, &out_size, sizeof out_size); /* (as this libetr's layout) */
  return true;
}

/* FNV-1a of s[0..n): the observer's hash of name strings (intern.c, the traceback name
 * cache). */
static inline uint64_t etr__fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* Whether p points into a string etr_intern handed out (bytes that never change). Lock-free;
 * a few compares per block of copies. */
bool etr__interned(const char *p);

/* Whether p's bytes can never change: interned, or in a read-only segment of the main
 * program (a literal of the runtime's executable). A string seen before at such an address
 * needs no compare. Lock-free after the first call (which lists the program's segments). */
bool etr__str_fixed(const char *p);

/* Around etr's waits and blocking calls on a host's thread (a recorder waiting for room,
 * flush, open, close, an observer's removal): cancellation off, so that pthread_cancel from
 * the host acts at its own next cancellation point, not inside etr with one of our locks
 * held (the cancelled thread's exit then waited for that lock forever, and every recorder
 * with it). Returns the state to restore. */
static inline int etr__cancel_off(void) {
  int old = PTHREAD_CANCEL_ENABLE;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  return old;
}
static inline void etr__cancel_restore(int old) {
  int was;
  pthread_setcancelstate(old, &was);
}

/* *d = ms milliseconds from now on CLOCK_MONOTONIC (for pthread_cond_clockwait). */
static inline void etr__deadline_ms(struct timespec *d, int ms) {
  clock_gettime(CLOCK_MONOTONIC, d);
  d->tv_sec += ms / 1000;
  d->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (d->tv_nsec >= 1000000000L) {
    d->tv_sec++;
    d->tv_nsec -= 1000000000L;
  }
}

#endif
