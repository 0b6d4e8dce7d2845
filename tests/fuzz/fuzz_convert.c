/* fuzz_convert — `etr convert`'s reading side (etr__bin_convert, src/observer/binlog.c) on
 * arbitrary bytes. The oracle: no crash, no sanitizer report, no hang; 0 or -1 with a
 * message; and the JSON it writes for a complete log parses (jansson).
 *
 * The first input byte picks the form: odd, the rest is the whole file (header parsing);
 * even, the rest follows a valid header and layout record, made at start-up by recording a
 * small binary log through the public API, so that the fuzzer works on records and events.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <etr/etr.h>

#include "observer/binlog.h"

#define FUZZ_TARGET "fuzz_convert"
#include "fuzz_check.h"

static int g_in = -1, g_out = -1;
static unsigned char g_prefix[4096];
static size_t g_prefix_len;

/* The header and layout record of a log this build writes. */
static void make_prefix(void) {
  char dir[] = "/tmp/etr-fuzz-convert-XXXXXX", path[64];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/p.etr", dir);
  etr_trace *tr = NULL;
  CHECK(etr_trace_open(path, NULL, &tr) == 0, "etr_trace_open %s", path);
  CHECK(etr_trace_close(tr) == 0, "etr_trace_close");
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL, "fopen %s", path);
  size_t n = fread(g_prefix, 1, sizeof g_prefix, f);
  fclose(f);
  unlink(path);
  rmdir(dir);
  CHECK(n > sizeof(etr__bin_header) + sizeof(etr__bin_record), "short log");
  etr__bin_record r;
  memcpy(&r, g_prefix + sizeof(etr__bin_header), sizeof r);
  g_prefix_len = sizeof(etr__bin_header) + sizeof r + ((r.len + 7u) & ~7u);
  CHECK(r.type == ETR__BIN_LAYOUT && g_prefix_len <= n, "no layout record first");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  g_in = memfd_create("fuzz_convert_in", 0);
  g_out = memfd_create("fuzz_convert_out", 0);
  CHECK(g_in >= 0 && g_out >= 0, "memfd_create");
  make_prefix();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool raw = data[0] & 1;
  data++;
  size--;
  CHECK(ftruncate(g_in, 0) == 0 && ftruncate(g_out, 0) == 0, "ftruncate");
  size_t at = 0;
  if (!raw) {
    CHECK(pwrite(g_in, g_prefix, g_prefix_len, 0) == (ssize_t)g_prefix_len, "memfd write");
    at = g_prefix_len;
  }
  CHECK(pwrite(g_in, data, size, (off_t)at) == (ssize_t)size, "memfd write");
  CHECK(lseek(g_in, 0, SEEK_SET) == 0 && lseek(g_out, 0, SEEK_SET) == 0, "lseek");
  etr__bin_result res;
  int rc = etr__bin_convert(g_in, g_out, &res);
  CHECK(rc == 0 || (rc == -1 && res.error[0]), "rc %d without a message", rc);
  if (rc == 0 && res.complete) {
    off_t n = lseek(g_out, 0, SEEK_END);
    CHECK(n > 0, "no output");
    char *text = malloc((size_t)n);
    CHECK(text && pread(g_out, text, (size_t)n, 0) == n, "read back");
    json_error_t je;
    json_t *root = json_loadb(text, (size_t)n, JSON_ALLOW_NUL, &je);
    CHECK(root != NULL, "a complete log gave text that is not JSON: %s (line %d)", je.text,
          je.line);
    json_decref(root);
    free(text);
  }
  return 0;
}
