/* Which strings a recording thread may know by address alone (src/observer/intern.c,
 * etr__str_fixed): interned copies and the main program's read-only literals, whose bytes
 * cannot change. Anything else (the heap, the stack, writable data, a shared library,
 * which may be unloaded and its range reused) must be compared byte for byte at each op:
 * calling one of those fixed would let a trace name an op by bytes its buffer no longer
 * holds. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <gnu/libc-version.h>
#include <stdlib.h>
#include <string.h>

#include <etr/etr.h>

#include "observer/internal.h"

static const char g_literal[] = "aten::literal";
static char g_writable[] = "aten::writable";

static void test_fixed_strings(void **state) {
  (void)state;
  assert_true(etr__str_fixed(g_literal));
  assert_true(etr__str_fixed("aten::inline_literal"));
  assert_true(etr__str_fixed(etr_intern("aten::interned")));
  assert_false(etr__str_fixed(NULL));
}

static void test_changeable_strings(void **state) {
  (void)state;
  assert_false(etr__str_fixed(g_writable)); /* .data: the program may write it */
  char stack[16] = "aten::stack";
  assert_false(etr__str_fixed(stack));
  char *heap = strdup(g_literal);
  assert_non_null(heap);
  assert_false(etr__str_fixed(heap));
  free(heap);
  /* A literal of a shared library (libc's version string, in its read-only segment). */
  const char *lib = gnu_get_libc_version();
  assert_non_null(lib);
  assert_false(etr__str_fixed(lib));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixed_strings),
      cmocka_unit_test(test_changeable_strings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
