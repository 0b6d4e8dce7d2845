/* tests/fuzz/fuzz_check.h — CHECK for the fuzz targets: a property that does not hold is
 * printed (which target, the condition, a printf-style reason) and made a crash, which
 * libFuzzer reports with the input that caused it.
 *
 * Before including, define FUZZ_TARGET as the target's name ("fuzz_reader"); define
 * FUZZ_FAIL() to end some other way than abort() (it must not return).
 */
#ifndef ETR_TESTS_FUZZ_CHECK_H
#define ETR_TESTS_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifndef FUZZ_TARGET
#error "define FUZZ_TARGET (the fuzz target's name) before including fuzz_check.h"
#endif
#ifndef FUZZ_FAIL
#define FUZZ_FAIL() abort()
#endif

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, FUZZ_TARGET ": check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      FUZZ_FAIL();                                                \
    }                                                             \
  } while (0)

#endif /* ETR_TESTS_FUZZ_CHECK_H */
