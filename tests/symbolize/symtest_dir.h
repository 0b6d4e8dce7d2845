/* The symbolizer tests' temporary directories (test_symbolize.c, test_symbolize_hostile.c):
 * one made under /tmp (asserts it was), and removed with the files in it. Include after
 * cmocka.h. */
#ifndef ETR_TESTS_SYMTEST_DIR_H
#define ETR_TESTS_SYMTEST_DIR_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static inline void temp_dir(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/etr-symtest-XXXXXX");
  assert_non_null(mkdtemp(dir));
}

static inline void remove_tree(const char *dir) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

#endif
