/* A plugin built twice (trace_reload_a, trace_reload_b) that differ in the name of the
 * function that calls back into the test, and nothing else that moves code: loaded one
 * after the other at the same address, the ops recorded through each must carry its own
 * frames (name, module, build id). test_trace_traceback.c opens them. */
#include <stddef.h>

typedef size_t (*reload_cb)(void *arg);

#ifdef RELOAD_B
#define INNER reload_inner_b_different
#else
#define INNER reload_inner_a_original
#endif

__attribute__((noinline)) static size_t INNER(reload_cb cb, void *arg) {
  size_t r = cb(arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}

__attribute__((noinline, visibility("default"))) size_t reload_entry(reload_cb cb, void *arg) {
  size_t r = INNER(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}
