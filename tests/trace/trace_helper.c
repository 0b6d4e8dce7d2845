/* tests/trace/trace_helper.c — a small program linked to etr that the trace tests run as a
 * child process:
 *
 *   trace_helper env                 records ops without calling any trace API (for
 *                                    ETR_TRACE activation) and returns from main
 *   trace_helper env-current         same, and exits 3 when etr_trace_current() is NULL
 *   trace_helper exit PATH           opens PATH, records, calls exit(0) without closing
 *   trace_helper exit-open PATH      same, with two ops still open at exit()
 *   trace_helper exit-busy PATH      same, while another thread records in a loop
 *
 * Exit status 0 on success; 2 on bad usage or a failed call.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <etr/etr.h>

static void op(const char *name, int with_values) {
  static int impl, stor;
  static const int64_t sz[2] = {2, 2};
  etr_tensor t = {&impl, &stor, 0, 4, 4, "float", "cpu", 2, sz, NULL};
  etr_value in[3] = {etr_value_tensor(&t), etr_value_int(1), etr_value_string("s")};
  etr_record r;
  etr_record_init(&r, name, ETR_SCOPE_FUNCTION);
  if (with_values && etr_record_needs_inputs(&r)) {
    r.inputs = in;
    r.n_inputs = 3;
  }
  etr_record_begin(&r);
  if (with_values && etr_record_needs_outputs(&r)) {
    r.outputs = in;
    r.n_outputs = 1;
  }
  etr_record_end(&r);
}

static void record_some(const char *prefix) {
  char outer_name[64], inner_name[64];
  snprintf(outer_name, sizeof outer_name, "%s_outer", prefix);
  snprintf(inner_name, sizeof inner_name, "%s_inner", prefix);
  for (int i = 0; i < 5; i++) {
    etr_record o;
    etr_record_init(&o, outer_name, ETR_SCOPE_USER_SCOPE);
    etr_record_begin(&o);
    op(inner_name, 1);
    op(inner_name, 1);
    etr_record_end(&o);
  }
}

static atomic_int busy_started;

static void *busy(void *p) {
  (void)p;
  for (;;) {
    op("busy_op", 1);
    atomic_store(&busy_started, 1);
  }
  return NULL;
}

static int open_trace(const char *path, etr_trace **out) {
  int rc = etr_trace_open(path, NULL, out);
  if (rc != 0) {
    fprintf(stderr, "trace_helper: etr_trace_open(%s): %s\n", path, etr_strerror(rc));
    return 2;
  }
  rc = etr_trace_enable(*out);
  if (rc != 0) return 2;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  if (strcmp(mode, "env") == 0 || strcmp(mode, "env-current") == 0) {
    record_some("env");
    if (strcmp(mode, "env-current") == 0 && etr_trace_current() == NULL) return 3;
    return 0;
  }
  if (argc < 3) return 2;
  etr_trace *t;
  if (open_trace(argv[2], &t) != 0) return 2;
  record_some("exit");
  if (strcmp(mode, "exit") == 0) exit(0);
  if (strcmp(mode, "exit-open") == 0) {
    etr_record a, b;
    etr_record_init(&a, "exit_open_a", ETR_SCOPE_FUNCTION);
    etr_record_begin(&a);
    etr_record_init(&b, "exit_open_b", ETR_SCOPE_FUNCTION);
    etr_record_begin(&b);
    op("exit_open_leaf", 0);
    exit(0);
  }
  if (strcmp(mode, "exit-busy") == 0) {
    pthread_t th;
    if (pthread_create(&th, NULL, busy, NULL) != 0) return 2;
    while (!atomic_load(&busy_started)) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    exit(0);
  }
  return 2;
}
