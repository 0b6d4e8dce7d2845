/* Test library for tests/symbolize: a known call chain symchain_a -> symchain_b ->
 * symchain_c -> callback, each step noinline and not a tail call (the last one made from
 * code inlined into symchain_c, two levels deep: symchain_inl -> symchain_inl2). Each function
 * stores the line of its call in symchain_lines before making it, so the test knows the expected
 * lines without parsing this file. */
typedef int (*symchain_cb)(int x);

#if defined(__clang__)
#define SYMCHAIN_NOINLINE __attribute__((noinline))
#else
#define SYMCHAIN_NOINLINE __attribute__((noinline, noclone))
#endif

int symchain_lines[3];

/* Lines of the calls made from inlined code: [0] symchain_inl's call of symchain_inl2,
 * [1] symchain_inl2's call of the callback. */
int symchain_inl_lines[2];

/* Inlined into symchain_inl, itself inlined into symchain_c: the callback's return address
 * in symchain_c expands to symchain_inl2 (at the callback's call), symchain_inl (at its call
 * of symchain_inl2) and symchain_c (at its call of symchain_inl: the line of the
 * non-expanded frame, not a line in here). */
static inline __attribute__((always_inline)) int symchain_inl2(int x, symchain_cb cb) {
  int r;
  symchain_inl_lines[1] = __LINE__ + 1;
  r = cb(x + 3);
  __asm__ volatile("" ::: "memory");
  return r;
}

static inline __attribute__((always_inline)) int symchain_inl(int x, symchain_cb cb) {
  int r;
  symchain_inl_lines[0] = __LINE__ + 1;
  r = symchain_inl2(x, cb);
  __asm__ volatile("" ::: "memory");
  return r;
}

SYMCHAIN_NOINLINE int symchain_c(int x, symchain_cb cb) {
  int r;
  symchain_lines[2] = __LINE__ + 1;
  r = symchain_inl(x, cb);
  __asm__ volatile("" ::: "memory");
  return r * 3 + 1;
}

SYMCHAIN_NOINLINE int symchain_b(int x, symchain_cb cb) {
  int r;
  symchain_lines[1] = __LINE__ + 1;
  r = symchain_c(x * 2, cb);
  __asm__ volatile("" ::: "memory");
  return r + 5;
}

SYMCHAIN_NOINLINE int symchain_a(int x, symchain_cb cb) {
  int r;
  symchain_lines[0] = __LINE__ + 1;
  r = symchain_b(x + 1, cb);
  __asm__ volatile("" ::: "memory");
  return r - 2;
}

/* A function that is not exported (absent from .dynsym), reached through its address; all
 * of its code is on one line. */
/* clang-format off */
int symchain_hidden_line = __LINE__ + 2;
SYMCHAIN_NOINLINE static int
symchain_hidden(int x) { __asm__ volatile("" ::: "memory"); return x * 11 + 1; }
/* clang-format on */

void *symchain_hidden_addr(void) { return (void *)&symchain_hidden; }
