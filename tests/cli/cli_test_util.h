/* tests/cli/cli_test_util.h — the temporary directory of the cmocka tests of the reader and
 * its byte source (test_reader.c, test_reader_inplace.c, test_source.c): one per test
 * program, made by the group setup, written into by file name, removed with everything in
 * it by the group teardown.
 *
 * The write helpers assert with cmocka: call them from inside a cmocka test.
 */
#ifndef ETR_TESTS_CLI_TEST_UTIL_H
#define ETR_TESTS_CLI_TEST_UTIL_H

#include <stddef.h>

/* cmocka group setup: make a fresh /tmp/etr-cli-test-XXXXXX. 0, or -1 when it cannot. */
int ct_tmpdir_setup(void **state);
/* cmocka group teardown: remove that directory and everything in it. 0 or -1. */
int ct_tmpdir_teardown(void **state);

/* The directory's path (valid after ct_tmpdir_setup). */
const char *ct_tmpdir(void);
/* "<tmpdir>/<name>", in a static buffer that the next call overwrites. */
const char *ct_tmp_path(const char *name);

/* Write len bytes of data as the whole file at path; asserts. */
void ct_write_file(const char *path, const void *data, size_t len);
/* Write the string text (without its NUL) as the whole file at path; asserts. */
void ct_write_text(const char *path, const char *text);

#endif /* ETR_TESTS_CLI_TEST_UTIL_H */
