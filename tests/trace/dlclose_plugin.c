/* A plugin that links libetr (tests/trace/test_trace_dlclose.c loads and unloads it). */
#include <etr/etr.h>

static etr_trace *g_trace;

int plugin_open(const char *path) {
  int rc = etr_trace_open(path, NULL, &g_trace);
  return rc ? rc : etr_trace_enable(g_trace);
}

void plugin_ops(int n) {
  for (int i = 0; i < n; i++) {
    etr_record r;
    etr_record_init(&r, "plugin_op", ETR_SCOPE_FUNCTION);
    etr_record_begin(&r);
    etr_record_end(&r);
  }
}

int plugin_close(void) { return etr_trace_close(g_trace); }
