/* What a trace is told (trace.c opens it): its options, read in this library's layout or in
 * etr 0.1.0's, and its traceback configuration, which can change while it records. */
#include <stdlib.h>
#include <string.h>

#include "observer/registry.h"
#include "observer/trace_internal.h"

/* etr 0.1.0's etr_trace_options held its traceback options by value in the middle (104
 * bytes). A program built against that header passes this layout: it is read as such, so
 * that it keeps working with this library. */
typedef struct options_0_1 {
  size_t struct_size;
  etr_schema schema;
  bool no_timing;
  uint32_t buffer_kb, max_buffers;
  double sample_probability;
  uint32_t scopes;
  etr_traceback_options traceback;
  uint32_t flush_ms, flush_kb;
  bool sync, fatal_signals;
  uint32_t stall_ms;
  bool ns_timing;
} options_0_1;
_Static_assert(sizeof(options_0_1) == 104, "etr 0.1.0's etr_trace_options is 104 bytes");
_Static_assert(sizeof(etr_trace_options) != sizeof(options_0_1),
               "etr_trace_options may never be 104 bytes: that size means etr 0.1.0's layout");

void etr__trace_options_read(etr_trace_options *o, const etr_trace_options *in,
                             etr_traceback_options *tb) {
  etr_trace_options d = ETR_TRACE_OPTIONS_INIT;
  *o = d;
  if (in && in->struct_size == sizeof(options_0_1)) {
    options_0_1 old;
    memcpy(&old, in, sizeof old);
    o->schema = old.schema;
    o->no_timing = old.no_timing;
    o->buffer_kb = old.buffer_kb;
    o->max_buffers = old.max_buffers;
    o->sample_probability = old.sample_probability;
    o->scopes = old.scopes;
    *tb = old.traceback;
    o->traceback = tb;
    o->flush_ms = old.flush_ms;
    o->flush_kb = old.flush_kb;
    o->sync = old.sync;
    o->fatal_signals = old.fatal_signals;
    o->stall_ms = old.stall_ms;
    o->ns_timing = old.ns_timing;
    return;
  }
  if (in) {
    size_t n = in->struct_size && in->struct_size < sizeof *o ? in->struct_size : sizeof *o;
    memcpy(o, in, n);
    o->struct_size = sizeof *o;
  }
}

int etr__trace_tb_configure(etr_trace *tr, const etr_traceback_options *in) {
  etr_traceback_options o = ETR_TRACEBACK_OPTIONS_INIT;
  size_t n = in->struct_size && in->struct_size < sizeof o ? in->struct_size : sizeof o;
  memcpy(&o, in, n);
  if (o.max_depth > ETR__TB_DEPTH_MAX || (unsigned)o.symbolize > ETR_SYMBOLIZE_MODULE)
    return ETR_EINVAL;
  etr__tbcfg *c = calloc(1, sizeof *c);
  if (!c) return ETR_ENOMEM;
  c->enabled = o.enabled;
  if (o.pattern && *o.pattern && !(c->pattern = strdup(o.pattern))) {
    free(c);
    return ETR_ENOMEM;
  }
  c->every = o.every ? o.every : 1;
  c->depth = o.max_depth ? o.max_depth : ETR__TB_DEPTH_DEFAULT;
  pthread_mutex_lock(&tr->tb_mutex);
  etr__tbcfg *old = atomic_load(&tr->tb_cfg);
  c->older = old;
  c->version = old ? old->version + 1 : 1;
  atomic_store_explicit(&tr->tb_cfg, c, memory_order_release);
  if (c->enabled) atomic_store(&tr->tb_ever, true);
  pthread_mutex_unlock(&tr->tb_mutex);
  return 0;
}

int etr_trace_set_traceback(etr_trace *tr, const etr_traceback_options *opt) {
  ETR__QUIET_CALL();
  int rc = etr__trace_call_enter(tr); /* (close frees tb_mutex and the configurations) */
  if (rc != 0) return rc;
  rc = opt ? etr__trace_tb_configure(tr, opt) : ETR_EINVAL;
  etr__trace_call_leave(tr);
  return rc;
}
