/* The writer thread must not keep a process alive that would have ended without it.
 *
 * A process whose main thread leaves by pthread_exit ends when its last thread ends: that
 * thread calls exit(0) (glibc, musl), which runs the atexit functions and the destructors.
 * The writer is a thread too, and blocks every signal: once the host's threads were gone,
 * the process lived on forever, unkillable but by SIGKILL (a process-directed SIGTERM
 * found no thread that takes it), its trace never finalized.
 *
 * So the main thread holds a key whose destructor runs only if it leaves by pthread_exit
 * (exit() runs no key destructor); from then on the writer looks every WATCH_MS whether it
 * is the process's only thread, and if so ends the process as the last thread would have,
 * with exit(0): the library's destructor then closes the trace on the writer thread, which
 * finishes the writer's work itself (trace.c join_writer). Nothing of this runs in a
 * process whose main thread did not leave early, and a process that has one thread left
 * besides the writer cannot start another. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "observer/internal.h"
#include "observer/trace_internal.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_main_key;
static bool g_key_ok;
static _Atomic bool g_main_gone;

static void main_left(void *arg) {
  (void)arg;
  atomic_store(&g_main_gone, true);
  etr__trace_wake_writer();
}

static void make_key(void) { g_key_ok = pthread_key_create(&g_main_key, main_left) == 0; }

void etr__main_watch(void) {
  if (etr__gettid() != getpid()) return; /* (not the main thread) */
  pthread_once(&g_once, make_key);
  if (g_key_ok && !pthread_getspecific(g_main_key)) pthread_setspecific(g_main_key, &g_once);
}

bool etr__main_gone(void) { return atomic_load_explicit(&g_main_gone, memory_order_relaxed); }

/* Whether the calling thread is the only one left of a process whose main thread left:
 * /proc/self/stat's 20th field counts the main thread until the process ends (a zombie,
 * whose remains hold the process's id), so 2. False when it cannot tell. */
bool etr__only_thread(void) {
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* (the command name may hold spaces and parentheses) */
  if (!p) return false;
  /* After ")": field 3 (state) on; num_threads is field 20. */
  for (int field = 2; field < 20; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return false;
  }
  long n_threads = strtol(p + 1, NULL, 10);
  return n_threads == 1 || (n_threads == 2 && etr__main_gone() && etr__gettid() != getpid());
}

void etr__end_as_last_thread(void) {
  /* The last thread's exit handlers run with signals as a host thread has them, not with
   * the writer's (all blocked). */
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, NULL);
  exit(0);
}

/* A forked child's main thread is the one that forked (perhaps after its parent's main
 * thread left): it counts as the main thread from now on. */
static void fork_child(void) {
  atomic_store(&g_main_gone, false);
  etr__main_watch();
}

/* At load: the main thread is known also when no trace is opened on it (ETR_TRACE, or a
 * trace opened by another thread). */
__attribute__((constructor)) static void lastthread_load(void) {
  etr__main_watch();
  pthread_atfork(NULL, NULL, fork_child);
}
