/* Test library for native capture: a chain of functions that calls back into the test.
 * Built twice (with and without frame pointers) with different name prefixes. Every call
 * uses its result afterwards, so no call becomes a tail call. */
#include <stddef.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(x) CAT(CHAIN_PREFIX, x)

typedef size_t (*chain_cb)(void *arg);

__attribute__((noinline, visibility("default"))) size_t NAME(chain_c)(chain_cb cb, void *arg) {
  size_t r = cb(arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}

__attribute__((noinline, visibility("default"))) size_t NAME(chain_b)(chain_cb cb, void *arg) {
  size_t r = NAME(chain_c)(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}

__attribute__((noinline, visibility("default"))) size_t NAME(chain_a)(chain_cb cb, void *arg) {
  size_t r = NAME(chain_b)(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + 1;
}

/* A frame of 16 KiB: its CFA offset does not fit a cached rule (libunwind unwinds it). */
__attribute__((noinline, visibility("default"))) size_t NAME(chain_big)(chain_cb cb, void *arg) {
  volatile char buf[16384];
  buf[0] = 1;
  buf[sizeof buf - 1] = 2;
  size_t r = NAME(chain_a)(cb, arg);
  __asm__ volatile("" ::: "memory");
  return r + (size_t)buf[0] + (size_t)buf[sizeof buf - 1];
}

/* A realigned frame: its CFA is a DWARF expression (libunwind unwinds it). */
__attribute__((noinline, visibility("default"))) size_t NAME(chain_aligned)(chain_cb cb,
                                                                            void *arg) {
  _Alignas(64) volatile char buf[64];
  buf[0] = 1;
  size_t r = NAME(chain_a)(cb, arg);
  __asm__ volatile("" : : "r"(buf) : "memory");
  return r + (size_t)buf[0];
}
