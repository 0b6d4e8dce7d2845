/* A plugin rebuilt between loads: the same code under another function name
 * (RELOAD_NAME alpha or bravo), built with and without a GNU build id (test_reload.c). */
#include <stddef.h>

#define RELOAD_CAT2(a, b) a##b
#define RELOAD_CAT(a, b) RELOAD_CAT2(a, b)
#define RELOAD_FN RELOAD_CAT(reload_fn_, RELOAD_NAME)

typedef void (*reload_cb)(const char *op);

__attribute__((noinline, visibility("default"))) void RELOAD_FN(reload_cb cb, const char *op) {
  cb(op);
  __asm__ volatile("" ::: "memory");
}

__attribute__((visibility("default"))) void reload_entry(reload_cb cb, const char *op) {
  RELOAD_FN(cb, op);
  __asm__ volatile("" ::: "memory");
}
