/* mt_ranks.c — launcher and socket mesh of the example runtime's ranks (see mt_ranks.h). */
#define _GNU_SOURCE

#include "mt_ranks.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "etr-example-runtime: %s: %s\n", what, strerror(errno));
  exit(1);
}

int mt_launch(int n, char **argv) {
  int fd[MT_MAX_RANKS][MT_MAX_RANKS]; /* fd[i][j]: rank i's end towards rank j */
  for (int i = 0; i < n; i++) {
    fd[i][i] = -1;
    for (int j = i + 1; j < n; j++) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
      fd[i][j] = sv[0];
      fd[j][i] = sv[1];
    }
  }
  fflush(NULL); /* nothing buffered is written twice by the children */
  pid_t pids[MT_MAX_RANKS];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) die("fork");
    if (pids[r] > 0) continue;
    char list[MT_MAX_RANKS * 12] = "", num[16];
    size_t len = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        if (i == j) continue;
        if (i == r) continue; /* ours: kept */
        close(fd[i][j]);
      }
    for (int j = 0; j < n; j++)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", j ? "," : "", fd[r][j]);
    snprintf(num, sizeof num, "%d", r);
    setenv("RANK", num, 1);
    setenv("LOCAL_RANK", num, 1);
    snprintf(num, sizeof num, "%d", n);
    setenv("WORLD_SIZE", num, 1);
    setenv("LOCAL_WORLD_SIZE", num, 1);
    setenv(MT_PEER_FDS_ENV, list, 1);
    /* A fresh process, as a launcher makes: ETR_TRACE and the library start anew in it. */
    execv("/proc/self/exe", argv);
    fprintf(stderr, "etr-example-runtime: exec of rank %d failed: %s\n", r, strerror(errno));
    _exit(127);
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) close(fd[i][j]);
  int failed = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    while (waitpid(pids[r], &st, 0) < 0)
      if (errno != EINTR) die("waitpid");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if (WIFSIGNALED(st))
      fprintf(stderr, "etr-example-runtime: rank %d died of signal %d\n", r, WTERMSIG(st));
    else
      fprintf(stderr, "etr-example-runtime: rank %d exited with status %d\n", r, WEXITSTATUS(st));
    failed = 1;
  }
  return failed;
}

int mt_mesh_from_env(mt_mesh *m) {
  const char *list = getenv(MT_PEER_FDS_ENV);
  if (!list) return 0;
  const char *rank = getenv("RANK");
  memset(m, 0, sizeof *m);
  m->rank = rank ? atoi(rank) : -1;
  const char *p = list;
  while (*p && m->size < MT_MAX_RANKS) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    m->fds[m->size++] = (int)v;
    p = *end == ',' ? end + 1 : end;
  }
  if (*p || m->rank < 0 || m->rank >= m->size || m->fds[m->rank] != -1) {
    fprintf(stderr, "etr-example-runtime: bad %s=%s (RANK=%s)\n", MT_PEER_FDS_ENV, list,
            rank ? rank : "unset");
    exit(1);
  }
  /* The sockets must not leak into programs this rank may exec. */
  for (int j = 0; j < m->size; j++)
    if (m->fds[j] >= 0 && fcntl(m->fds[j], F_SETFD, FD_CLOEXEC) != 0) die("fcntl");
  return 1;
}

static void send_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("send to a peer rank");
    p += k;
    n -= (size_t)k;
  }
}

static void recv_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) {
      fprintf(stderr, "etr-example-runtime: a peer rank went away\n");
      exit(1);
    }
    if (k < 0) die("recv from a peer rank");
    p += k;
    n -= (size_t)k;
  }
}

/* One exchange with every peer, in peer order; the lower rank of a pair sends first, so no
 * cycle of blocked senders can form even when messages outgrow the socket buffers. */
static void exchange(mt_mesh *m, int j, const void *out, void *in, size_t n) {
  if (m->rank < j) {
    send_all(m->fds[j], out, n);
    recv_all(m->fds[j], in, n);
  } else {
    recv_all(m->fds[j], in, n);
    send_all(m->fds[j], out, n);
  }
}

void mt_mesh_allreduce(mt_mesh *m, float *data, int64_t n) {
  size_t bytes = (size_t)n * sizeof(float);
  float *all = calloc((size_t)m->size * (size_t)(n > 0 ? n : 1), sizeof(float));
  if (!all) die("calloc");
  for (int j = 0; j < m->size; j++) {
    if (j == m->rank)
      memcpy(all + (size_t)j * (size_t)n, data, bytes);
    else
      exchange(m, j, data, all + (size_t)j * (size_t)n, bytes);
  }
  for (int64_t i = 0; i < n; i++) {
    float s = 0.0f;
    for (int j = 0; j < m->size; j++) s += all[(size_t)j * (size_t)n + (size_t)i];
    data[i] = s;
  }
  free(all);
}

void mt_mesh_alltoall(mt_mesh *m, const float *in, float *out, int64_t k) {
  size_t bytes = (size_t)k * sizeof(float);
  for (int j = 0; j < m->size; j++) {
    if (j == m->rank)
      memcpy(out + (size_t)j * (size_t)k, in + (size_t)j * (size_t)k, bytes);
    else
      exchange(m, j, in + (size_t)j * (size_t)k, out + (size_t)j * (size_t)k, bytes);
  }
}

void mt_mesh_close(mt_mesh *m) {
  for (int j = 0; j < m->size; j++)
    if (m->fds[j] >= 0) close(m->fds[j]);
}
