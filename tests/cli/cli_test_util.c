/* The temporary directory of the reader's cmocka tests (cli_test_util.h). */
#include "cli_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char tmpdir[] = "/tmp/etr-cli-test-XXXXXX";

int ct_tmpdir_setup(void **state) {
  (void)state;
  return mkdtemp(tmpdir) ? 0 : -1;
}

int ct_tmpdir_teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

const char *ct_tmpdir(void) { return tmpdir; }

const char *ct_tmp_path(const char *name) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
  return buf;
}

void ct_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

void ct_write_text(const char *path, const char *text) { ct_write_file(path, text, strlen(text)); }
