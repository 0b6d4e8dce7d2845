/* fuzz_commands — every analysis command of `etr` (summary, summary --json, chrome, graph,
 * replay, flame, repair, chakra) run in process on arbitrary bytes, written to a memfd as the
 * trace file. The oracle: no crash, no sanitizer report, no hang (libFuzzer's timeout), and
 * an exit status of 0 (done) or 1 (bad input); 2 (usage) only from repair, which gives it for
 * input that is no trace at all. Which commands
 * run is chosen by the first byte, so that each input exercises a few of them quickly.
 * Outputs go to /dev/null or to a directory of this process's own (chakra).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int cmd_summary(int argc, char **argv);
int cmd_chrome(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_flame(int argc, char **argv);
int cmd_repair(int argc, char **argv);
#ifdef ETR_HAVE_CMD_CHAKRA
int cmd_chakra(int argc, char **argv);
#endif

static int g_fd = -1;
static char g_path[64];
static char g_dir[64];

#define FUZZ_TARGET "fuzz_commands"
#include "fuzz_check.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("ETR_PROGRESS", "0", 1);
  g_fd = memfd_create("fuzz_commands", 0);
  CHECK(g_fd >= 0, "memfd_create");
  snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/etr-fuzz-cmd-XXXXXX", base);
  CHECK(mkdtemp(g_dir) != NULL, "mkdtemp %s", g_dir);
  int nul = open("/dev/null", O_WRONLY); /* the commands' reports */
  if (nul >= 0) {
    dup2(nul, 1);
    close(nul);
  }
  return 0;
}

/* most_rc: the highest exit status the command may give (repair exits 2 on input that is
 * not a trace at all, as it documents). */
static void run(const char *name, int (*fn)(int, char **), char **argv, int most_rc) {
  int argc = 0;
  while (argv[argc]) argc++;
  int rc = fn(argc, argv);
  CHECK(rc >= 0 && rc <= most_rc, "etr %s returned %d", name, rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned pick = data[0];
  data++;
  size--;
  CHECK(ftruncate(g_fd, 0) == 0 && pwrite(g_fd, data, size, 0) == (ssize_t)size, "memfd write");
  char *p = g_path;
  if (pick & 1) run("summary", cmd_summary, (char *[]){"summary", p, NULL}, 1);
  if (pick & 2) run("summary --json", cmd_summary, (char *[]){"summary", "--json", p, NULL}, 1);
  if (pick & 4) run("chrome", cmd_chrome, (char *[]){"chrome", p, "-o", "/dev/null", NULL}, 1);
  if (pick & 8) run("graph", cmd_graph, (char *[]){"graph", "--path", "5", p, NULL}, 1);
  if (pick & 16) run("replay", cmd_replay, (char *[]){"replay", "--path", "5", p, NULL}, 1);
  if (pick & 32) run("flame", cmd_flame, (char *[]){"flame", p, "-o", "/dev/null", NULL}, 1);
  if (pick & 64) run("repair", cmd_repair, (char *[]){"repair", p, "-o", "/dev/null", NULL}, 2);
#ifdef ETR_HAVE_CMD_CHAKRA
  if (pick & 128) run("chakra", cmd_chakra, (char *[]){"chakra", p, "-o", g_dir, NULL}, 1);
#endif
  return 0;
}
