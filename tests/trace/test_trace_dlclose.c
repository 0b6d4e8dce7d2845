/* libetr loaded by a plugin that the host unloads (dlclose) while a thread that recorded
 * through it is still alive: that thread's exit runs libetr's thread-state destructor, which
 * must still be there. Before libetr was linked -z nodelete, the thread crashed at its exit
 * (SIGSEGV in __nptl_deallocate_tsd). This program does not link libetr itself: the plugin
 * (dlclose_plugin.c) is its only user.
 *
 * usage: test_trace_dlclose PLUGIN DIR   (writes DIR/dl_<round>.json; exit 0 when every
 * round ran and every thread exited) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*open_fn)(const char *);
typedef void (*ops_fn)(int);
typedef int (*close_fn)(void);

static ops_fn g_ops;
static atomic_int g_phase;

static void *worker(void *arg) {
  (void)arg;
  g_ops(500); /* (its thread state is libetr's now) */
  atomic_store(&g_phase, 1);
  while (atomic_load(&g_phase) != 2) usleep(1000);
  return NULL; /* exits after the plugin was unloaded */
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  for (int round = 0; round < 3; round++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      return 3;
    }
    open_fn open_trace = (open_fn)(uintptr_t)dlsym(h, "plugin_open");
    close_fn close_trace = (close_fn)(uintptr_t)dlsym(h, "plugin_close");
    g_ops = (ops_fn)(uintptr_t)dlsym(h, "plugin_ops");
    if (!open_trace || !close_trace || !g_ops) return 4;
    char path[4096];
    snprintf(path, sizeof path, "%s/dl_%d.json", argv[2], round);
    if (open_trace(path) != 0) return 5;
    atomic_store(&g_phase, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, worker, NULL) != 0) return 6;
    while (atomic_load(&g_phase) != 1) usleep(1000);
    g_ops(100);
    if (close_trace() != 0) return 7;
    if (dlclose(h) != 0) return 8;
    atomic_store(&g_phase, 2);
    pthread_join(th, NULL);
  }
  puts("dlclose: 3 rounds, every thread exited");
  return 0;
}
