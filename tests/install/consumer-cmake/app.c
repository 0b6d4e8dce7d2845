/* tests/install/consumer-cmake/app.c — a C program built against an installed etr (through
 * find_package and through pkg-config). It records one operator into a trace at argv[1] and
 * checks that the file holds the operator. Exit 0 on success. */
#include <etr/etr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  int found;
  if (f == NULL) return -1;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return -1;
  }
  buf = malloc((size_t)n + 1);
  if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return -1;
  }
  buf[n] = '\0';
  found = strstr(buf, needle) != NULL;
  free(buf);
  fclose(f);
  return found;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "consumer_c.json";
  etr_trace *trace = NULL;
  int64_t sizes[2] = {2, 2}, strides[2] = {2, 1};
  float data[4] = {1, 2, 3, 4};
  etr_tensor t = {data, data, 0, 4, 4, "float", "cpu", 2, sizes, strides};
  etr_value in[2], out[1];
  etr_record rec;
  int rc;

  if (etr_version() != ETR_VERSION_NUMBER) {
    fprintf(stderr, "library version %s, header %s\n", etr_version_string(), ETR_VERSION_STRING);
    return 1;
  }
  rc = etr_trace_open(path, NULL, &trace);
  if (rc != 0) {
    fprintf(stderr, "etr_trace_open(%s): %s\n", path, etr_strerror(rc));
    return 1;
  }
  etr_trace_enable(trace);

  in[0] = etr_value_tensor(&t);
  in[1] = etr_value_int(2);
  out[0] = etr_value_tensor(&t);
  etr_record_init(&rec, "consumer::c_op", ETR_SCOPE_FUNCTION);
  if (etr_record_needs_inputs(&rec)) {
    rec.inputs = in;
    rec.n_inputs = 2;
  }
  etr_record_begin(&rec);
  data[0] *= 2;
  if (etr_record_needs_outputs(&rec)) {
    rec.outputs = out;
    rec.n_outputs = 1;
  }
  etr_record_end(&rec);

  rc = etr_trace_close(trace);
  if (rc != 0) {
    fprintf(stderr, "etr_trace_close: %s\n", etr_strerror(rc));
    return 1;
  }
  rc = file_contains(path, "\"consumer::c_op\"");
  if (rc != 1) {
    fprintf(stderr, "%s: %s\n", path, rc < 0 ? "missing or empty" : "has no consumer::c_op node");
    return 1;
  }
  printf("ok: %s holds consumer::c_op (etr %s)\n", path, etr_version_string());
  return 0;
}
