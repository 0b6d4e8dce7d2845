/* fuzz_symbolize — `etr symbolize` run in process on arbitrary bytes (the trace), written to
 * a memfd. The oracle: no crash, no sanitizer report, no hang (libFuzzer's timeout), exit 0
 * or 1, and on 0 an output that `etr symbolize` itself reads again (exit 0).
 *
 * Module files: the process works in a directory of its own holding copies of one ELF
 * library with DWARF (SYMCHAIN_PATH: "lib.so", "sub/lib.so", and under ".build-id/" by its
 * build id) and a few files that are not ELF ("empty", "text", a FIFO "fifo", a directory
 * "dir"); the run gets "--search-dir ." too. open() is wrapped (-Wl,--wrap=open): a path that
 * is relative without "..", /dev/null or /proc/self/fd/N is opened, any other fails with
 * ENOENT, so the fuzzer's module paths reach only that directory. The first byte picks the
 * options (search dir or not), the rest is the trace; tests/fuzz/corpus/fuzz_symbolize holds
 * module-mode traces naming "lib.so" at offsets of its functions (inlined calls among them).
 * The command's summary and errors go to stderr: run with -close_fd_mask=2 (libFuzzer keeps
 * its own and the sanitizers' reports).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>
#include <libelf.h>

int cmd_symbolize(int argc, char **argv);

#define FUZZ_TARGET "fuzz_symbolize"
#include "fuzz_check.h"

int __real_open(const char *path, int flags, ...);

static bool allowed(const char *path) {
  if (path == NULL) return false;
  if (strcmp(path, "/dev/null") == 0 || strncmp(path, "/proc/self/fd/", 14) == 0) return true;
  if (path[0] == '/' || strstr(path, "..") != NULL) return false;
  return true;
}

int __wrap_open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = (mode_t)va_arg(ap, int);
    va_end(ap);
  }
  if (!allowed(path)) {
    errno = ENOENT;
    return -1;
  }
  return __real_open(path, flags, mode);
}

static int g_in = -1;
static char g_in_path[64];

static void copy_file(const char *from, const char *to) {
  int a = __real_open(from, O_RDONLY | O_CLOEXEC);
  CHECK(a >= 0, "open %s", from);
  int b = __real_open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(b >= 0, "create %s", to);
  char buf[65536];
  ssize_t n;
  while ((n = read(a, buf, sizeof buf)) > 0) CHECK(write(b, buf, (size_t)n) == n, "write %s", to);
  close(a);
  close(b);
}

static void put(const char *path, const char *text) {
  int fd = __real_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write %s", path);
  close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ETR_PROGRESS", "0", 1);
  char dir[64];
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(dir, sizeof dir, "%s/etr-fuzz-sym-XXXXXX", base);
  CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  CHECK(chdir(dir) == 0, "chdir %s", dir);
  CHECK(mkdir("sub", 0755) == 0 && mkdir("dir", 0755) == 0 && mkdir(".build-id", 0755) == 0,
        "mkdir");
  copy_file(SYMCHAIN_PATH, "lib.so");
  copy_file(SYMCHAIN_PATH, "sub/lib.so");
  /* DIR/.build-id/xx/rest.debug, by the library's build id */
  elf_version(EV_CURRENT);
  int fd = __real_open("lib.so", O_RDONLY | O_CLOEXEC);
  Elf *elf = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
  const unsigned char *bid = NULL;
  ssize_t n = elf ? dwelf_elf_gnu_build_id(elf, (const void **)&bid) : -1;
  CHECK(n > 1, "%s has no build id", SYMCHAIN_PATH);
  char hex[130] = {0}, bpath[200];
  for (ssize_t i = 0; i < n && i < 64; i++) snprintf(hex + 2 * i, 3, "%02x", bid[i]);
  snprintf(bpath, sizeof bpath, ".build-id/%.2s", hex);
  CHECK(mkdir(bpath, 0755) == 0, "mkdir %s", bpath);
  snprintf(bpath, sizeof bpath, ".build-id/%.2s/%s.debug", hex, hex + 2);
  copy_file(SYMCHAIN_PATH, bpath);
  elf_end(elf);
  close(fd);
  put("empty", "");
  put("text",
      "\x7f"
      "ELF not really\n");
  CHECK(mkfifo("fifo", 0644) == 0, "mkfifo");
  g_in = memfd_create("fuzz_symbolize_in", 0);
  CHECK(g_in >= 0, "memfd_create");
  snprintf(g_in_path, sizeof g_in_path, "/proc/self/fd/%d", g_in);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned pick = data[0];
  data++;
  size--;
  CHECK(ftruncate(g_in, 0) == 0 && pwrite(g_in, data, size, 0) == (ssize_t)size, "memfd write");
  unlink("out.json");
  char *with_dir[] = {"symbolize", "-d", "dir", "-d", ".", "-o", "out.json", g_in_path, NULL};
  char *plain[] = {"symbolize", "-o", "out.json", g_in_path, NULL};
  char **argv = pick & 1 ? with_dir : plain;
  int argc = 0;
  while (argv[argc]) argc++;
  int rc = cmd_symbolize(argc, argv);
  CHECK(rc == 0 || rc == 1, "etr symbolize returned %d", rc);
  if (rc == 0) { /* the output is a trace that reads again (symbolized again: nothing new) */
    struct stat st;
    CHECK(stat("out.json", &st) == 0 && st.st_size > 0, "no output");
    char *argv2[] = {"symbolize", "-o", "/dev/null", "out.json", NULL};
    rc = cmd_symbolize(4, argv2);
    CHECK(rc == 0, "the output of etr symbolize does not read again (%d)", rc);
  }
  return 0;
}
