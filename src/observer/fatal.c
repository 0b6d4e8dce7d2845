/* Fatal signals: on SIGSEGV, SIGBUS, SIGABRT, SIGTERM and SIGINT the open trace is written
 * out and finalized (trace.c: etr__trace_fatal), then the signal goes on to whatever handler
 * was installed before ours, or to its default action, so the host's own crash handling
 * (core dumps, crash reporters, Python's KeyboardInterrupt) still happens.
 *
 * The handler only uses async-signal-safe calls: atomics, sem_post, nanosleep, pwrite,
 * sigaction, raise. The formatting is done by the writer thread, which is not the thread
 * that received the signal; if the writer does not answer in time, the handler writes a
 * minimal footer itself (trace.c: seal_direct).
 *
 * Signals belong to the host (docs/RELIABILITY.md): this is opt-in, and where the host has a
 * handler of its own, ours takes that handler's flags and mask, so the host's blocking
 * calls are interrupted (or restarted) exactly as before: CPython's SIGINT handler has no
 * SA_RESTART, and Ctrl-C must still interrupt a read(2). The host's handler is called from
 * ours; if it leaves by siglongjmp we never learn whether it returned, so the writer's hold
 * on the finalized file expires by itself (trace.c: FATAL_HOLD_MS) and holds no lock.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "observer/internal.h"
#include "observer/trace_internal.h"

static const int k_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT};
#define N_SIGNALS (sizeof k_signals / sizeof k_signals[0])

/* Written under the trace module's g_lock (install and remove); read by handlers. */
static struct sigaction g_previous[N_SIGNALS];
static bool g_installed[N_SIGNALS];
static _Atomic(struct etr_trace *) g_fatal_trace;

static int signal_index(int sig) {
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (k_signals[i] == sig) return (int)i;
  return -1;
}

/* Hand the signal on as if we had never been there. Returns false when the default action
 * follows (the process ends), true when a handler of the host's returned. */
static bool chain(int idx, int sig, siginfo_t *si, void *uc) {
  const struct sigaction *prev = &g_previous[idx];
  if (prev->sa_flags & SA_SIGINFO) {
    if (prev->sa_sigaction) {
      prev->sa_sigaction(sig, si, uc);
      return true;
    }
  } else if (prev->sa_handler == SIG_IGN) {
    return true;
  } else if (prev->sa_handler != SIG_DFL) {
    prev->sa_handler(sig);
    return true;
  }
  /* The default action. Our handler steps aside for good (the process is ending). A fault
   * raised by an instruction happens again when we return, now with the default action,
   * so the core dump shows the real faulting state; a sent signal is sent again (it stays
   * pending until this handler returns). */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  bool fault = (sig == SIGSEGV || sig == SIGBUS) && si && si->si_code > 0;
  if (!fault) raise(sig);
  return false;
}

static void on_fatal(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  int idx = signal_index(sig);
  struct etr_trace *tr = atomic_load(&g_fatal_trace);
  if (tr) etr__trace_fatal(tr, sig);
  bool survived = idx >= 0 && chain(idx, sig, si, uc);
  /* Until the host's handler returns, the file stays as finalized: the host's threads may
   * go on recording, and the process may die any moment. */
  if (tr) etr__trace_fatal_end(tr, survived);
  errno = saved_errno;
}

int etr__fatal_install(struct etr_trace *tr) {
  int rc = 0;
  for (size_t i = 0; i < N_SIGNALS; i++) {
    struct sigaction cur;
    if (sigaction(k_signals[i], NULL, &cur) != 0) continue;
    /* A signal the host ignores stays ignored: it does not end the process. */
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    bool host = (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != NULL : cur.sa_handler != SIG_DFL;
    if (host) {
      /* The host's flags and mask, as if its handler were still the one installed. */
      sa.sa_flags = cur.sa_flags | SA_SIGINFO;
      sa.sa_mask = cur.sa_mask;
    } else {
      /* The default action ends the process: nothing of the host's to keep. */
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
      sigfillset(&sa.sa_mask); /* no other signal handler runs in the middle of ours */
    }
    if (sigaction(k_signals[i], &sa, &g_previous[i]) != 0) {
      rc = -1;
      continue;
    }
    g_installed[i] = true;
  }
  atomic_store(&g_fatal_trace, tr);
  return rc;
}

void etr__fatal_remove(struct etr_trace *tr) {
  if (atomic_load(&g_fatal_trace) != tr) return;
  atomic_store(&g_fatal_trace, NULL);
  for (size_t i = 0; i < N_SIGNALS; i++) {
    if (!g_installed[i]) continue;
    g_installed[i] = false;
    /* Put the previous handler back only if ours is still the one installed: a handler
     * the host installed after us (and that may chain to ours) stays. */
    struct sigaction cur;
    if (sigaction(k_signals[i], NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_fatal)
      sigaction(k_signals[i], &g_previous[i], NULL);
  }
}
