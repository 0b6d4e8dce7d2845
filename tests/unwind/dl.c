/* Test library opened with dlopen and closed between two captures. */
#include <stddef.h>

typedef size_t (*dl_cb)(void *arg);

__attribute__((noinline, visibility("default"))) size_t unwind_dl_inner(dl_cb cb, void *arg) {
  size_t r = cb(arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}

__attribute__((visibility("default"))) size_t unwind_dl_entry(dl_cb cb, void *arg) {
  size_t r = unwind_dl_inner(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}
