/* A trace's public calls against its close (the counting that lets other threads call into
 * a trace while one closes it), its counters (stats_get, which counts itself the same
 * way), the closed handles kept as tombstones, and the freeing of a trace (all of it but the
 * handle; a forked child's copy, its chunk lists only). trace.c's close waits through
 * etr__trace_wait_calls. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etr/trace.h"
#include "observer/internal.h"
#include "observer/registry.h"
#include "observer/ring.h"
#include "observer/tbtable.h"
#include "observer/trace_internal.h"

/* ---- calls against close ----
 *
 * Any thread may call flush, dump, disable, enable, is_enabled, set_traceback or stats_get on
 * a handle while another closes it. Each of those counts itself in tr->calls for as long as
 * it uses the trace's locks or memory, and close frees them only once the count is back to 0.
 * New calls are refused (ETR_ESTATE) once close has set tr->closing, stats_get's copy of the
 * live counters once close has set tr->closed (it then copies final_stats). Close sets the
 * mark, stops the writer (a flush waiting for it is woken and returns), then waits.
 *
 * Why a call that close does not wait for never touches the trace: the counter and the marks
 * are seq_cst atomics, so their operations have one total order. A call adds 1, then loads the
 * mark; close stores the mark, then loads the count. If the call's load comes after close's
 * store, it sees the mark (never cleared) and leaves at once. Otherwise its increment came
 * before close's store, hence before every load of the count close makes after it: close sees
 * the call until its decrement, which comes after the call's last use of the trace. The
 * counter and the marks are in the handle, which outlives the trace (a tombstone).
 *
 * Close waits by polling, not on a condition variable: leaving takes no lock (a signal
 * handler's or a forked child's view of it never blocks), and the calls it waits for are
 * short once the writer is stopped. t_calls counts this thread's calls in progress: close (or
 * flush, dump, disable) from a signal handler that interrupted one of them would wait for
 * itself; they return ETR_EBUSY. */
static _Thread_local uint32_t t_calls __attribute__((tls_model("initial-exec")));

int etr__trace_call_enter(const etr_trace *ctr) {
  if (!etr__trace_usable(ctr)) return etr__trace_unusable(ctr);
  etr_trace *tr = (etr_trace *)ctr; /* (the handle is never const: only its counters change) */
  atomic_fetch_add(&tr->calls, 1);
  if (atomic_load(&tr->closing)) {
    atomic_fetch_sub(&tr->calls, 1);
    return ETR_ESTATE;
  }
  t_calls++;
  return 0;
}

void etr__trace_call_leave(const etr_trace *ctr) {
  t_calls--;
  atomic_fetch_sub(&((etr_trace *)ctr)->calls, 1);
}

bool etr__trace_in_call(void) { return t_calls != 0; }

void etr__trace_wait_calls(etr_trace *tr) {
  for (unsigned spins = 0; atomic_load(&tr->calls) != 0; spins++) {
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 100000}; /* 0.1 ms */
      nanosleep(&ts, NULL);
    }
  }
}

void etr__trace_collect_stats(const etr_trace *tr, etr_trace_stats *s) {
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  /* The list is walked without threads_mutex (prepended with release stores, never
   * shortened while the trace is open): the writer calls this at a fatal signal, when the
   * thread that crashed may hold that lock. */
  for (etr__tstate *ts = __atomic_load_n(&tr->threads, __ATOMIC_ACQUIRE); ts; ts = ts->next) {
    s->ops_recorded += atomic_load_explicit(&ts->ops_recorded, memory_order_relaxed);
    s->ends_without_begin += atomic_load_explicit(&ts->ends_without_begin, memory_order_relaxed);
    s->ends_out_of_order += atomic_load_explicit(&ts->ends_out_of_order, memory_order_relaxed);
    s->strings_cut += atomic_load_explicit(&ts->strings_cut, memory_order_relaxed);
    s->lists_cut += atomic_load_explicit(&ts->lists_cut, memory_order_relaxed);
    s->nesting_cut += atomic_load_explicit(&ts->nesting_cut, memory_order_relaxed);
    s->nodes_dropped += atomic_load_explicit(&ts->nodes_dropped, memory_order_relaxed);
    s->objects += atomic_load_explicit(&ts->objects, memory_order_relaxed);
    s->tracebacks += atomic_load_explicit(&ts->tracebacks, memory_order_relaxed);
    s->ops_abandoned += atomic_load_explicit(&ts->ops_abandoned, memory_order_relaxed);
  }
  s->nodes_written = atomic_load(&tr->nodes_written);
  s->bytes_written = atomic_load(&tr->bytes_written);
  s->threads = atomic_load(&tr->threads_count);
  s->ids_retired = atomic_load(&tr->ids_retired);
  s->utf8_replaced = atomic_load(&tr->utf8_replaced);
  s->values_fixed = atomic_load(&tr->values_fixed);
  s->ends_cross_thread = atomic_load(&etr__ends_cross_thread) - tr->cross_ends_at_open;
  s->ops_open_at_disable = atomic_load(&tr->ops_open_at_disable);
  s->ops_open_at_thread_exit = atomic_load(&tr->ops_open_at_thread_exit);
  s->ops_open_at_close = atomic_load(&tr->ops_open_at_close);
  s->nodes_dropped += atomic_load(&tr->nodes_dropped_writer);
  s->buffer_waits = atomic_load(&tr->buffer_waits);
  s->write_error = atomic_load(&tr->write_error);
  s->tracebacks_unique = atomic_load(&tr->tb_unique);
  s->frames_unique = atomic_load(&tr->tb_frames);
  s->tracebacks_cut = atomic_load(&tr->tb_cut);
  s->ring_dropped = atomic_load(&tr->ring_dropped);
}

int etr_trace_stats_get(const etr_trace *tr, etr_trace_stats *out) {
  ETR__QUIET_CALL();
  if (!tr || !out) return ETR_EINVAL;
  etr_trace_stats s;
  /* Counted as a call, refused only once close has the final counters (calls against
   * close): the live ones are read from memory close frees. */
  _Atomic uint32_t *calls = &((etr_trace *)tr)->calls;
  t_calls++;
  atomic_fetch_add(calls, 1);
  if (tr->closed)
    s = tr->final_stats;
  else
    etr__trace_collect_stats(tr, &s);
  atomic_fetch_sub(calls, 1);
  t_calls--;
  size_t n = out->struct_size == 0 || out->struct_size > sizeof s ? sizeof s : out->struct_size;
  memcpy(out, &s, n);
  out->struct_size = n;
  return 0;
}

/* ---- closed handles ----
 *
 * Closed traces stay allocated as small tombstones, so that a second close (or any call) on
 * the handle is recognised and returns ETR_ESTATE instead of touching freed memory, and a
 * new trace never reuses the address of a recent one. The oldest are freed beyond this many.
 * Callers serialise (trace.c's lock). */
#define TOMBSTONES 1024
static etr_trace *g_tombs[TOMBSTONES];
static size_t g_tomb_next;

void etr__trace_entomb(etr_trace *tr) {
  tr->closed = true;
  etr_trace *old = g_tombs[g_tomb_next];
  g_tombs[g_tomb_next] = tr;
  g_tomb_next = (g_tomb_next + 1) % TOMBSTONES;
  free(old);
}

/* ---- freeing ---- */

/* Frees everything but the handle itself (see etr__trace_entomb).
 * in_child: a forked child's copy. Only the chunk lists are freed, which the fork handlers
 * held still (q_mutex); the rest was the parent's writer's and recording threads' to change
 * without a lock at the moment of the fork (a symbolizer's table half grown, an arena being
 * reallocated), and freeing such a copy could free a block twice: it stays, reachable from
 * the tombstone (copy-on-write memory the child never touches). Its mutexes and condition
 * variables may show waiters that do not exist here: left too. */
void etr__trace_free(etr_trace *tr, bool in_child) {
  etr__chunk *lists[2] = {tr->q_head, tr->free_chunks};
  for (int i = 0; i < 2; i++)
    for (etr__chunk *c = lists[i]; c;) {
      etr__chunk *n = c->next;
      free(c);
      c = n;
    }
  tr->q_head = tr->free_chunks = NULL;
  if (in_child) {
    if (tr->tables_fd >= 0) close(tr->tables_fd); /* (the parent's file: never removed) */
    tr->tables_fd = -1;
    if (tr->dump_prev_fd >= 0) close(tr->dump_prev_fd);
    tr->dump_prev_fd = -1;
    return;
  }
  for (etr__tstate *ts = tr->threads; ts;) {
    etr__tstate *n = ts->next;
    free(ts->chunk);
    free(ts->arena);
    free(ts->frames);
    free(ts->tb_ips);
    if (ts->cstr)
      for (uint32_t i = 0; i < ETR__CSTR_SLOTS; i++) free(ts->cstr[i].copy);
    free(ts->cstr);
    free(ts->cten);
    etr__cev_dec_free(ts->dec);
    free(ts);
    ts = n;
  }
  if (tr->tid_pages)
    for (size_t i = 0; i < ETR__TID_PAGES; i++) free(tr->tid_pages[i]);
  free(tr->tid_pages);
  for (etr__tbcfg *c = atomic_load(&tr->tb_cfg); c;) {
    etr__tbcfg *o = c->older;
    free(c->pattern);
    free(c);
    c = o;
  }
  etr__tbtab_free(tr->tbtab);
  etr__ring_free(tr->ring);
  tr->ring = NULL;
  etr__idmap_free(tr->tensors);
  etr__idmap_free(tr->storages);
  etr__jw_free(&tr->jw);
  etr__emit_free(tr);
  free(tr->cev_out.buf);
  tr->cev_out.buf = NULL;
  if (tr->tables_fd >= 0) close(tr->tables_fd);
  tr->tables_fd = -1;
  free(tr->tables_path);
  tr->tables_path = NULL;
  if (tr->dump_prev_fd >= 0) close(tr->dump_prev_fd); /* (a dump that never ended) */
  tr->dump_prev_fd = -1;
  free(tr->path);
  free(tr->dump_path);
  free(tr->dump_tmp);
  tr->path = tr->dump_path = tr->dump_tmp = NULL;
  etr__jw_free(&tr->tables_out);
  tr->q_head = tr->free_chunks = NULL;
  tr->threads = NULL;
  tr->tid_pages = NULL;
  tr->tb_cfg = NULL;
  tr->tb_cfg_now = NULL;
  tr->tbtab = NULL;
  tr->tensors = tr->storages = NULL;
  pthread_mutex_destroy(&tr->threads_mutex);
  pthread_mutex_destroy(&tr->tb_mutex);
  pthread_mutex_destroy(&tr->q_mutex);
  sem_destroy(&tr->wake);
  pthread_cond_destroy(&tr->space_cond);
  pthread_cond_destroy(&tr->done_cond);
}
