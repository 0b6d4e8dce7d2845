/* Fatal signals: on SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT and the others of k_signals
 * (below) the open trace is written
 * out and finalized (etr__trace_fatal, below) when the signal is about to end the process,
 * so the host's own crash handling (core dumps, crash reporters, Python's KeyboardInterrupt)
 * still happens, and a signal the host handles costs it nothing.
 *
 * The order depends on what was installed before ours:
 *  - the default action: finalize, then put the default action back and let the signal
 *    end the process (chain, below);
 *  - a handler of the host's, for a signal that handler has not yet been seen to resolve:
 *    finalize, then the host's handler. One that ends the process itself (Python's
 *    faulthandler, a sanitizer's, one that calls _exit) finds the file finalized. When it
 *    returns and the signal does not come again to end the process (ends_on_return), the
 *    host resolves this signal: a GC write barrier or a JIT's guard page that resolves a
 *    SIGSEGV, CPython's SIGINT flag, a graceful-shutdown flag. The writer reopens the file
 *    for the nodes to come, and we learn it (g_host_resolves);
 *  - a handler of the host's for a signal it resolves: that handler runs first, on a file
 *    nobody touches, so the signals it resolves cost it nothing after the first. When it
 *    returns, the disposition it left says what comes next (ends_on_return): ours still
 *    installed, the host's own handler put back, or the signal ignored: the host dealt with
 *    it, and nothing is written. Any other disposition with the signal coming again (a
 *    fault's instruction runs again; a sent signal the handler raised again is pending
 *    until we return): the crash-handler pattern, the process is about to end, and we
 *    finalize before we return. A handler that leaves by siglongjmp recovered, one that
 *    ends the process itself leaves the file as written so far (`etr repair` completes it);
 *  - SIGABRT always takes the first order (finalize, then the host's handler): abort() ends
 *    the process after a handler that returns, without calling ours again.
 *
 * The handler only uses async-signal-safe calls: atomics, sem_post, nanosleep,
 * clock_gettime, pwrite, sigaction, sigpending, raise. The formatting is done by the writer
 * thread, which is not the thread that received the signal; if the writer does not answer in
 * time, the handler writes a minimal footer itself (seal_direct, below).
 *
 * Signals belong to the host (docs/RELIABILITY.md): this is opt-in, and where the host has a
 * handler of its own, ours takes that handler's flags and mask, so the host's blocking
 * calls are interrupted (or restarted) exactly as before: CPython's SIGINT handler has no
 * SA_RESTART, and Ctrl-C must still interrupt a read(2). Once the file was finalized for a
 * process that does not end after all (a SIGABRT handler that leaves by siglongjmp), the
 * writer's hold on it expires by itself (writer_thread.c: FATAL_HOLD_MS) and holds no lock.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "observer/internal.h"
#include "etr/version.h"
#include "observer/trace_internal.h"

/* Every signal whose default action ends the process and that a host does not use for
 * its own ends (not SIGUSR1/2, SIGALRM, the profiling timers, the real-time ones): the
 * faults, abort, Ctrl-C and Ctrl-\, a kill, a closed terminal, a reader gone, a CPU limit.
 * Until 2026-11-28 the first five only: a division by zero, a trap, a hang-up or SIGPIPE
 * left the file unfinalized. */
static const int k_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGTERM, SIGINT, SIGFPE,
                                SIGILL,  SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU};
#define N_SIGNALS (sizeof k_signals / sizeof k_signals[0])

/* Written under the trace module's g_lock (install and remove); read by handlers. */
static struct sigaction g_previous[N_SIGNALS];
static bool g_installed[N_SIGNALS];
/* Per signal: the host's handler returned from one and the process went on (on_fatal). */
static _Atomic bool g_host_resolves[N_SIGNALS];
static _Atomic(struct etr_trace *) g_fatal_trace;
/* Handlers using g_fatal_trace's trace right now: close waits for them (etr__fatal_remove)
 * before it closes the file and frees what they use. Not counted while the host's handler
 * runs, which may leave by siglongjmp. The argument is the one of trace.c's "calls against
 * close": a handler adds 1 then loads the pointer, close clears it then loads the count
 * (seq_cst), so close sees every handler that found the trace. */
static _Atomic int g_handlers_in;

static struct etr_trace *handler_trace_take(void) {
  atomic_fetch_add(&g_handlers_in, 1);
  struct etr_trace *tr = atomic_load(&g_fatal_trace);
  if (!tr) atomic_fetch_sub(&g_handlers_in, 1);
  return tr;
}

static void handler_trace_drop(struct etr_trace *tr) {
  if (tr) atomic_fetch_sub(&g_handlers_in, 1);
}

/* Whether the signal is a fault of the instruction that runs again when the handler
 * returns (not a sent one). */
static bool is_fault(int sig, const siginfo_t *si) {
  return (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) && si &&
         si->si_code > 0;
}

static int signal_index(int sig) {
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (k_signals[i] == sig) return (int)i;
  return -1;
}

/* Whether sa calls a function (not the default action, not ignored). */
static bool calls_handler(const struct sigaction *sa) {
  if (sa->sa_flags & SA_SIGINFO) return sa->sa_sigaction != NULL;
  return sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN;
}

/* Whether a and b call the same function. */
static bool same_handler(const struct sigaction *a, const struct sigaction *b) {
  if ((a->sa_flags & SA_SIGINFO) != (b->sa_flags & SA_SIGINFO)) return false;
  if (a->sa_flags & SA_SIGINFO) return a->sa_sigaction == b->sa_sigaction;
  return a->sa_handler == b->sa_handler;
}

static void on_fatal(int sig, siginfo_t *si, void *uc);

/* Per signal: the host's handler was installed with SA_RESETHAND (one-shot). Ours is not
 * (it would be one-shot too: the next such signal would go to the default action without
 * being finalized), so the host's is spent here instead: from its first call on, the
 * previous action is the default one, as it would have been without us. */
static bool g_oneshot[N_SIGNALS];
static _Atomic bool g_spent[N_SIGNALS];
static const struct sigaction g_default_action; /* (zero: SIG_DFL, no flags) */

/* What was installed before ours, as it stands now. */
static const struct sigaction *previous(int idx) {
  return atomic_load_explicit(&g_spent[idx], memory_order_relaxed) ? &g_default_action
                                                                   : &g_previous[idx];
}

static void call_host(const struct sigaction *prev, int sig, siginfo_t *si, void *uc) {
  if (prev->sa_flags & SA_SIGINFO)
    prev->sa_sigaction(sig, si, uc);
  else
    prev->sa_handler(sig);
}

/* After the host's handler (prev) returned: whether the process ends when ours returns. It
 * does when the signal comes again (a fault's instruction runs again; a sent signal the
 * handler raised again is pending: blocked while we run) to something else than ours, the
 * host's handler or SIG_IGN: the default action, as a crash handler leaves it, or another
 * handler that a crash reporter hands the signal on to. A handler that only put the default
 * action back for next time (a second Ctrl-C kills) leaves nothing pending: the process goes
 * on. */
static bool ends_on_return(const struct sigaction *prev, const struct sigaction *at_entry, int sig,
                           const siginfo_t *si) {
  struct sigaction cur;
  if (sigaction(sig, NULL, &cur) != 0) return false;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fatal) return false;
  /* Installed when the signal came to us: a handler the host installed after ours, which
   * chains to it (a crash reporter, libjsig), left in place. */
  if (same_handler(&cur, at_entry)) return false;
  if (same_handler(&cur, prev)) return false;
  if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) return false;
  if (is_fault(sig, si)) return true;
  sigset_t pending;
  return sigpending(&pending) == 0 && sigismember(&pending, sig) == 1;
}

/* Hand the signal on as if we had never been there. Returns false when the default action
 * follows (the process ends), true when a handler of the host's returned. */
static bool chain(int idx, int sig, siginfo_t *si, void *uc) {
  const struct sigaction *prev = previous(idx);
  if (calls_handler(prev)) {
    if (g_oneshot[idx]) atomic_store_explicit(&g_spent[idx], true, memory_order_relaxed);
    call_host(prev, sig, si, uc);
    return true;
  }
  if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_IGN) return true;
  /* The default action. Our handler steps aside for good (the process is ending). A fault
   * raised by an instruction happens again when we return, now with the default action,
   * so the core dump shows the real faulting state; a sent signal is sent again (it stays
   * pending until this handler returns). */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (!is_fault(sig, si)) raise(sig);
  return false;
}

static void on_fatal(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  int idx = signal_index(sig);
  bool host = idx >= 0 && calls_handler(previous(idx));
  struct sigaction at_entry; /* (what is installed now: ours, or a later handler chaining) */
  memset(&at_entry, 0, sizeof at_entry);
  if (host) sigaction(sig, NULL, &at_entry);
  if (host && atomic_load_explicit(&g_host_resolves[idx], memory_order_relaxed)) {
    /* The host's handler first: a signal it resolves costs nothing and touches no file. */
    if (g_oneshot[idx]) atomic_store_explicit(&g_spent[idx], true, memory_order_relaxed);
    call_host(&g_previous[idx], sig, si, uc);
    /* The process ends as we return: finalize now. The writer's hold on the file is never
     * released (it expires by itself should the process go on after all). */
    if (ends_on_return(&g_previous[idx], &at_entry, sig, si)) {
      struct etr_trace *tr = handler_trace_take();
      if (tr) etr__trace_fatal(tr, sig);
      handler_trace_drop(tr);
    }
    errno = saved_errno;
    return;
  }
  struct etr_trace *tr = handler_trace_take();
  if (tr) etr__trace_fatal(tr, sig);
  handler_trace_drop(tr);
  bool survived = idx >= 0 && chain(idx, sig, si, uc);
  /* The host's handler returned and the signal does not come again to end the process: the
   * host resolves this signal (a GC barrier, a flag), and from now on its handler runs
   * first. Until then a handler that ends the process itself (faulthandler, a sanitizer's,
   * one that calls _exit) finds the file finalized. Not SIGABRT: abort() ends the process
   * after a handler that returns, without calling ours again. */
  bool ends = host && survived && ends_on_return(&g_previous[idx], &at_entry, sig, si);
  if (host && survived && sig != SIGABRT && !ends)
    atomic_store_explicit(&g_host_resolves[idx], true, memory_order_relaxed);
  /* Until the signal's outcome is known, the file stays as finalized: the host's threads
   * may go on recording, and the process may die any moment (as it does when the host's
   * handler left the signal to come again to the default action). A SIGABRT handler that
   * returned is no sign of life: abort() goes on to end the process. The trace is the one
   * finalized, unless it was closed meanwhile (another may be open by now). */
  if (tr) {
    struct etr_trace *now = handler_trace_take();
    if (now == tr) etr__trace_fatal_end(tr, survived && !ends && sig != SIGABRT);
    handler_trace_drop(now);
  }
  errno = saved_errno;
}

int etr__fatal_install(struct etr_trace *tr) {
  int rc = 0;
  for (size_t i = 0; i < N_SIGNALS; i++) {
    struct sigaction cur;
    if (sigaction(k_signals[i], NULL, &cur) != 0) continue;
    /* Ours already (a forked child's copy of its parent's, whose trace the child let go
     * before opening its own): what it chains to stays the host's. Taken as the previous
     * handler, it would call itself until the stack ran out (SIGSEGV for a SIGTERM). */
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fatal) {
      g_installed[i] = true;
      continue;
    }
    /* A signal the host ignores stays ignored: it does not end the process. */
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    bool host = (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != NULL : cur.sa_handler != SIG_DFL;
    atomic_store(&g_spent[i], false);
    g_oneshot[i] = host && (cur.sa_flags & SA_RESETHAND);
    if (host) {
      /* The host's flags and mask, as if its handler were still the one installed; not
       * SA_RESETHAND, which the handler emulates (g_oneshot). */
      sa.sa_flags = (cur.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
      sa.sa_mask = cur.sa_mask;
    } else {
      /* The default action ends the process: nothing of the host's to keep. */
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
      sigfillset(&sa.sa_mask); /* no other signal handler runs in the middle of ours */
    }
    atomic_store(&g_host_resolves[i], false); /* (learnt anew for each handler) */
    if (sigaction(k_signals[i], &sa, &g_previous[i]) != 0) {
      rc = -1;
      continue;
    }
    g_installed[i] = true;
  }
  atomic_store(&g_fatal_trace, tr);
  return rc;
}

void etr__fatal_forget(struct etr_trace *tr) {
  struct etr_trace *mine = tr;
  atomic_compare_exchange_strong(&g_fatal_trace, &mine, NULL);
}

void etr__fatal_remove(struct etr_trace *tr) {
  if (atomic_load(&g_fatal_trace) != tr) return;
  atomic_store(&g_fatal_trace, NULL);
  /* Handlers that found the trace finish with it first (bounded: one waits at most
   * FATAL_WAIT_MS for the writer, which close has not stopped yet). */
  for (int i = 0; i < 50000 && atomic_load(&g_handlers_in) > 0; i++) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < N_SIGNALS; i++) {
    if (!g_installed[i]) continue;
    g_installed[i] = false;
    /* Put the previous handler back only if ours is still the one installed: a handler
     * the host installed after us (and that may chain to ours) stays. */
    struct sigaction cur;
    if (sigaction(k_signals[i], NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_fatal)
      sigaction(k_signals[i], previous((int)i), NULL); /* (a spent one-shot: the default) */
  }
}

/* ---- a stack for the handler ----
 *
 * A stack overflow (deep recursion with ops open, on the main thread or a thread with a
 * small stack) faults with no stack left to run a handler on: the kernel kills the process
 * with SIGSEGV, and the file was never finalized. So a thread that records into a trace
 * with fatal_signals gets an alternate signal stack of etr's (our handler is installed with
 * SA_ONSTACK where it replaces the default action), unless it has one already (the host's,
 * a sanitizer's, Rust's: kept). The thread's exit (trace.c's hook) gives it back, unless the
 * thread is running on it then; a host that installs its own later replaces it, and ours
 * is unmapped at the thread's exit all the same. */
#define ALT_STACK_SIZE (64 * 1024)
static _Thread_local void *t_alt_map __attribute__((tls_model("initial-exec")));
static _Thread_local size_t t_alt_len __attribute__((tls_model("initial-exec")));

void etr__fatal_thread_stack(void) {
  if (t_alt_map) return;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t size = ALT_STACK_SIZE;
  if ((size_t)SIGSTKSZ > size) size = (size_t)SIGSTKSZ;
  size = (size + page - 1) / page * page;
  char *map = mmap(NULL, size + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) return;
  (void)mprotect(map, page, PROT_NONE); /* (a guard below it) */
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = map + page;
  ss.ss_size = size;
  if (sigaltstack(&ss, NULL) != 0) {
    munmap(map, size + page);
    return;
  }
  t_alt_map = map;
  t_alt_len = size + page;
}

void etr__fatal_thread_exit(void) {
  if (!t_alt_map) return;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || (cur.ss_flags & SS_ONSTACK)) return; /* (kept) */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (cur.ss_sp == (char *)t_alt_map + page && !(cur.ss_flags & SS_DISABLE)) {
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, NULL) != 0) return;
  }
  munmap(t_alt_map, t_alt_len);
  t_alt_map = NULL;
}

/* ---- fatal signals (handler side; everything here is async-signal-safe) ---- */

/* How long a handler waits for the writer to finalize the file: polling every 50 us for
 * the first 20 ms (a writer that answers takes well under a millisecond for a small
 * trace), then every millisecond, so a stuck writer costs few wake-ups. */
#define FATAL_WAIT_MS 3000
#define FATAL_FAST_POLL_NS 50000
#define FATAL_FAST_POLL_MS 20

/* Appends s to buf[at..cap); an overflow gives cap + 1, which stays past the end. */
static size_t put_text(char *buf, size_t at, size_t cap, const char *s, size_t n) {
  if (at > cap || n > cap - at) return cap + 1;
  for (size_t i = 0; i < n; i++) buf[at + i] = s[i];
  return at + n;
}
#define PUT_LIT(buf, at, cap, lit) put_text((buf), (at), (cap), (lit), sizeof(lit) - 1)

/* The writer did not answer (it is the thread that crashed, or it is stuck, perhaps on a
 * lock the crashed thread holds): when no write is under way, the file ends with whole
 * nodes, so write the process node and a short footer ourselves. The traceback tables and
 * the buffered nodes are lost then; the file stays valid. */
static void seal_direct(etr_trace *tr, int sig) {
  /* A binary log needs no footer (etr convert reads any prefix); a flight recorder's file
   * holds its last dump, which a handler cannot make (it allocates). */
  if (tr->binary || tr->ring) return;
  /* A descriptor the host writes too (/dev/stdout...): its end is not ours to place or cut
   * (the writer's own footer goes through the shared offset; a handler's would land in the
   * middle of the host's writes and cut the ones after). */
  if (tr->jw.shared) return;
  int idle = ETR__IO_IDLE;
  if (!atomic_compare_exchange_strong(&tr->io_state, &idle, ETR__IO_HANDLER)) return;
  if (tr->sealed || tr->jw.err || tr->seal_node_len == 0) return;
  uint64_t off = tr->unseal_pending ? tr->seal_off : tr->jw.written;
  bool nodes = tr->unseal_pending ? tr->seal_any_node : off > tr->header_len;
  /* (static: only the handler that took io_state above gets here, once; a host's alternate
   * signal stack may be small) */
  static char buf[sizeof tr->seal_node + 256];
  char num[24];
  size_t n = 0;
  if (nodes) n = PUT_LIT(buf, n, sizeof buf, ",");
  n = put_text(buf, n, sizeof buf, tr->seal_node, tr->seal_node_len);
  n = PUT_LIT(buf, n, sizeof buf, "\n  ],\n  \"finish_ts\": ");
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  char *e = etr__put_i64(num, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
  n = put_text(buf, n, sizeof buf, num, (size_t)(e - num));
  n = PUT_LIT(buf, n, sizeof buf,
              ",\n  \"etr\": {\"version\": \"" ETR_VERSION_STRING "\", \"signal\": ");
  e = etr__put_i64(num, sig);
  n = put_text(buf, n, sizeof buf, num, (size_t)(e - num));
  n = PUT_LIT(buf, n, sizeof buf, ", \"stats\": {}}\n}\n");
  if (n > sizeof buf) return;
  /* A gzip trace gets the text as one more member, stored: deflate would allocate. */
  static unsigned char member[sizeof buf + 64];
  const char *out = buf;
  if (tr->jw.gz) {
    n = etr__gz_stored_member(member, sizeof member, buf, n);
    if (n == 0) return;
    out = (const char *)member;
  }
  for (size_t done = 0; done < n;) {
    ssize_t w = pwrite(tr->fd, out + done, n - done, (off_t)(off + done));
    if (w > 0)
      done += (size_t)w;
    else if (!(w < 0 && errno == EINTR))
      return;
  }
  if (ftruncate(tr->fd, (off_t)(off + n)) != 0) return; /* a cut-off old footer may follow */
}

/* CLOCK_MONOTONIC in ns (clock_gettime is async-signal-safe). */
static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void etr__trace_fatal_end(etr_trace *tr, bool survived) {
  if (tr->closed || tr->pid != getpid() || !survived) return;
  /* (never below 0: the writer forgets a hold that expired, writer_thread.c) */
  uint32_t holds = atomic_load(&tr->fatal_hold);
  while (holds && !atomic_compare_exchange_weak(&tr->fatal_hold, &holds, holds - 1)) {
  }
  sem_post(&tr->wake);
}

void etr__trace_fatal(etr_trace *tr, int sig) {
  if (tr->closed || tr->pid != getpid()) return;
  atomic_store(&tr->fatal_hold_ns, etr__now_ns());
  atomic_fetch_add(&tr->fatal_hold, 1);
  atomic_store(&tr->fatal_sig, sig);
  uint32_t req = atomic_fetch_add(&tr->fatal_req, 1) + 1;
  if (atomic_load(&tr->writer_tid) != etr__gettid()) {
    sem_post(&tr->wake);
    int64_t start = mono_ns();
    for (;;) {
      if ((int32_t)(atomic_load(&tr->fatal_ack) - req) >= 0) return;
      int64_t waited = mono_ns() - start;
      if (waited >= (int64_t)FATAL_WAIT_MS * 1000000) break;
      struct timespec step = {
          0, waited < (int64_t)FATAL_FAST_POLL_MS * 1000000 ? FATAL_FAST_POLL_NS : 1000000};
      nanosleep(&step, NULL);
    }
  }
  seal_direct(tr, sig);
}
