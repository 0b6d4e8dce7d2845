/* Test library built twice (unwind_dl2a, unwind_dl2b) whose inner function has a stack frame
 * of a different size: loaded one after the other at the same address, a capture through
 * the second must use the second's unwind rules and module, not what was cached for the
 * first. */
#include <stddef.h>

#ifndef DL2_FRAME
#define DL2_FRAME 256
#endif

typedef size_t (*dl_cb)(void *arg);

__attribute__((noinline, visibility("default"))) size_t unwind_dl2_inner(dl_cb cb, void *arg) {
  volatile char buf[DL2_FRAME];
  buf[0] = 1;
  size_t r = cb(arg);
  __asm__ volatile("" ::: "memory");
  return r + (size_t)buf[0];
}

__attribute__((visibility("default"))) size_t unwind_dl2_entry(dl_cb cb, void *arg) {
  size_t r = unwind_dl2_inner(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}
