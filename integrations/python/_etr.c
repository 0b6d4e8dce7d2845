/* _etr: the CPython extension behind the `etr` Python package (integrations/python/etr).
 *
 * Trace(path, timing=True (False; "ns": also ts_ns, dur_ns), schema="1.1.1", flush_ms=0, gzip
 *       by the path's ".gz")
 *     .enable() .disable() .flush() .stats() -> dict .close() -> dict .closed
 * Op(name, inputs=(), scope=0, schema=None)        one operator call; a context manager:
 *     .begin() .end(outputs=(), failed=False)      __exit__ ends it failed on an exception
 * profile(on, pass_prefix=None)   record every Python function call of the thread as an op
 *                                  (python_calls.c)
 * thread_set_name(s)  thread_id()
 * env_trace_open()  close_env_trace()   the ETR_TRACE trace (a forked child's, before os._exit)
 *
 * Python values become etr values: None, bool, int (outside int64: a double, an infinity past
 * a double's range), float, str,
 * list, tuple (nested values and long lists are cut as etr cuts them, and counted), and any other
 * object as an opaque object of its type's name. The converted tree lives only for the call that
 * reads it (etr copies what it keeps).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "etr/etr.h"

#include "cpython_frames.h"
#include "dist_py.h"
#include "python_calls.h"

#define MAX_DEPTH 34   /* past etr's own limit (32), so that etr cuts and counts */
#define MAX_ITEMS 4097 /* one more than etr keeps, so that etr counts the cut */
/* Values converted per call at most, all levels together: a list that holds itself, or the
 * same list at every level, would otherwise expand to 2^depth values. etr keeps at most
 * 1 MiB of encoded values per op, at least 2 bytes a value, so this is past what it keeps;
 * a list past it goes in without items, which etr counts as cut. */
#define MAX_VALUES (1u << 19)
#define ITEMS_NONE (-1) /* a list's items index: none converted (over MAX_VALUES) */

/* ---- values ---- */

/* A converted value tree: one block of values plus the Python objects whose buffers the
 * strings point into (kept alive until the tree is freed). */
typedef struct vtree {
  etr_value *vals;
  size_t n, cap;
  PyObject *keep; /* list */
} vtree;

static etr_value *vt_alloc(vtree *t, size_t n) {
  if (t->n + n > t->cap) {
    size_t cap = t->cap ? t->cap : 16;
    while (cap < t->n + n) cap *= 2;
    etr_value *v = PyMem_Realloc(t->vals, cap * sizeof *v);
    if (!v) return NULL;
    t->vals = v;
    t->cap = cap;
  }
  t->n += n;
  return t->vals + t->n - n;
}

static void vt_free(vtree *t) {
  PyMem_Free(t->vals);
  Py_XDECREF(t->keep);
  memset(t, 0, sizeof *t);
}

/* Values are stored by index while the block may still move; fixed up in vt_fix. */
static int convert(vtree *t, PyObject *o, size_t at, int depth) {
  etr_value v;
  if (o == Py_None) {
    v = etr_value_none();
  } else if (PyBool_Check(o)) {
    v = etr_value_bool(o == Py_True);
  } else if (PyLong_Check(o)) {
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (i == -1 && PyErr_Occurred()) return -1;
    double d = 0;
    if (overflow) { /* beyond int64: a double; beyond a double's range: an infinity */
      d = PyLong_AsDouble(o);
      if (d == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        d = overflow < 0 ? -HUGE_VAL : HUGE_VAL;
      }
    }
    v = overflow ? etr_value_double(d) : etr_value_int(i);
  } else if (PyFloat_Check(o)) {
    v = etr_value_double(PyFloat_AS_DOUBLE(o));
  } else if (PyUnicode_Check(o)) {
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(o, &len);
    if (!s) { /* lone surrogates: passed as they are, etr replaces them (utf8_replaced) */
      PyErr_Clear();
      PyObject *b = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
      if (!b || PyList_Append(t->keep, b) < 0) {
        Py_XDECREF(b);
        return -1;
      }
      Py_DECREF(b);
      s = PyBytes_AS_STRING(b);
      len = PyBytes_GET_SIZE(b);
    }
    if (len > UINT32_MAX) len = UINT32_MAX;
    v = len ? etr_value_string_n(s, (uint32_t)len) : etr_value_string("");
  } else if ((PyList_Check(o) || PyTuple_Check(o)) && depth < MAX_DEPTH) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    size_t k = n > MAX_ITEMS ? MAX_ITEMS : (size_t)n;
    v = PyList_Check(o) ? etr_value_list(NULL, (uint32_t)k) : etr_value_tuple(NULL, (uint32_t)k);
    if (t->n + k > MAX_VALUES) {
      v.u.i = ITEMS_NONE;
    } else {
      etr_value *items = vt_alloc(t, k);
      if (!items && k) return -1;
      size_t first = k ? (size_t)(items - t->vals) : 0;
      for (size_t i = 0; i < k; i++)
        if (convert(t, PySequence_Fast_GET_ITEM(o, (Py_ssize_t)i), first + i, depth + 1) < 0)
          return -1;
      v.u.i = (int64_t)first; /* an index until vt_fix */
    }
  } else {
    v = etr_value_object(depth >= MAX_DEPTH ? "..." : Py_TYPE(o)->tp_name);
  }
  t->vals[at] = v;
  return 0;
}

static void vt_fix(vtree *t) {
  for (size_t i = 0; i < t->n; i++) {
    etr_value *v = &t->vals[i];
    if (v->kind == ETR_VALUE_LIST || v->kind == ETR_VALUE_TUPLE)
      v->u.items = v->count && v->u.i != ITEMS_NONE ? t->vals + v->u.i : NULL;
  }
}

/* seq (a list or tuple, or NULL/None) into t; the top-level values are t->vals[0..n). */
static int convert_all(vtree *t, PyObject *seq, size_t *n_out) {
  memset(t, 0, sizeof *t);
  *n_out = 0;
  if (!seq || seq == Py_None) return 0;
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
    PyErr_SetString(PyExc_TypeError, "inputs and outputs must be a list or a tuple");
    return -1;
  }
  t->keep = PyList_New(0);
  if (!t->keep) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  size_t k = n > MAX_ITEMS ? MAX_ITEMS : (size_t)n;
  if (k && !vt_alloc(t, k)) {
    PyErr_NoMemory();
    return -1;
  }
  for (size_t i = 0; i < k; i++)
    if (convert(t, PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), i, 0) < 0) {
      if (!PyErr_Occurred()) PyErr_NoMemory();
      return -1;
    }
  vt_fix(t);
  *n_out = k;
  return 0;
}

/* ---- errors ---- */

static PyObject *EtrError;

static PyObject *etr_fail(int rc, const char *what) {
  PyErr_Format(EtrError, "%s: %s (%s)", what, etr_strerror(rc), etr_err_name(rc));
  return NULL;
}

/* ---- Trace ---- */

typedef struct {
  PyObject_HEAD etr_trace *t;
  PyObject *path;
  etr_trace_stats last; /* the final counters once closed */
  int close_rc;         /* what the close returned */
  bool closing;         /* a thread is closing it (with the GIL released) */
  bool closed;
  PyObject *weakrefs; /* (the package keeps open traces by weak reference: os._exit) */
} TraceObject;

static PyObject *stats_dict(const etr_trace_stats *s) {
  const struct {
    const char *name;
    uint64_t v;
  } f[] = {{"nodes_written", s->nodes_written},
           {"ops_recorded", s->ops_recorded},
           {"bytes_written", s->bytes_written},
           {"threads", s->threads},
           {"objects", s->objects},
           {"ids_retired", s->ids_retired},
           {"strings_cut", s->strings_cut},
           {"lists_cut", s->lists_cut},
           {"utf8_replaced", s->utf8_replaced},
           {"nesting_cut", s->nesting_cut},
           {"values_fixed", s->values_fixed},
           {"ends_without_begin", s->ends_without_begin},
           {"ends_out_of_order", s->ends_out_of_order},
           {"ends_cross_thread", s->ends_cross_thread},
           {"ops_abandoned", s->ops_abandoned},
           {"ops_open_at_disable", s->ops_open_at_disable},
           {"ops_open_at_thread_exit", s->ops_open_at_thread_exit},
           {"ops_open_at_close", s->ops_open_at_close},
           {"nodes_dropped", s->nodes_dropped},
           {"buffer_waits", s->buffer_waits},
           {"write_error", (uint64_t)s->write_error},
           {"tracebacks", s->tracebacks},
           {"tracebacks_unique", s->tracebacks_unique},
           {"frames_unique", s->frames_unique},
           {"ring_dropped", s->ring_dropped},
           {"tracebacks_cut", s->tracebacks_cut}};
  PyObject *d = PyDict_New();
  for (size_t i = 0; d && i < sizeof f / sizeof f[0]; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(f[i].v);
    if (!v || PyDict_SetItemString(d, f[i].name, v) < 0) Py_CLEAR(d);
    Py_XDECREF(v);
  }
  return d;
}

/* Whether option `name` (v) lies in 0..max; else a ValueError that says so. (Parsed as a
 * long long: the unsigned formats wrap a negative number around without a word.) */
static bool opt_in_range(const char *name, long long v, long long max) {
  if (v >= 0 && v <= max) return true;
  PyErr_Format(PyExc_ValueError, "%s must be 0..%lld, not %lld", name, max, v);
  return false;
}

static int Trace_init(TraceObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"path",      "timing",          "schema",          "flush_ms", "ring_mb",
                           "traceback", "traceback_every", "traceback_depth", "signals",  NULL};
  PyObject *path, *traceback = Py_None, *timing = Py_True;
  int signals = 0;
  const char *schema = "1.1.1";
  long long flush_ms = 0, ring_mb = 0, tb_every = 0, tb_depth = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$OsLLOLLp", kwlist, PyUnicode_FSConverter, &path,
                                   &timing, &schema, &flush_ms, &ring_mb, &traceback, &tb_every,
                                   &tb_depth, &signals))
    return -1;
  /* timing: True, False or "ns", not a truth value: as one, "ns" (and "0", "off") gave
   * whole-µs timing without a word. 0 and 1 are False and True, as Python compares them. */
  bool no_timing = false, ns_timing = false;
  int overflow = 0;
  long long tv = PyLong_Check(timing) ? PyLong_AsLongLongAndOverflow(timing, &overflow) : -1;
  if (PyUnicode_Check(timing) && PyUnicode_CompareWithASCIIString(timing, "ns") == 0) {
    ns_timing = true;
  } else if (tv == 0 || tv == 1) {
    no_timing = tv == 0;
  } else {
    PyErr_Format(PyExc_ValueError, "timing must be True, False or \"ns\", not %R", timing);
    Py_DECREF(path);
    return -1;
  }
  /* (the ranges of the environment variables, docs/API.md) */
  if (!opt_in_range("flush_ms", flush_ms, 86400000) || !opt_in_range("ring_mb", ring_mb, 1048576) ||
      !opt_in_range("traceback_every", tb_every, 1000000000) ||
      !opt_in_range("traceback_depth", tb_depth, 256)) {
    Py_DECREF(path);
    return -1;
  }
  /* traceback: None/False (off), True (every op), or a str: an op-name pattern (fnmatch) */
  etr_traceback_options tb = ETR_TRACEBACK_OPTIONS_INIT;
  if (PyUnicode_Check(traceback)) {
    tb.enabled = true;
    if (!(tb.pattern = PyUnicode_AsUTF8(traceback))) {
      Py_DECREF(path);
      return -1;
    }
  } else if (traceback != Py_None) {
    int on = PyObject_IsTrue(traceback);
    if (on < 0) {
      Py_DECREF(path);
      return -1;
    }
    tb.enabled = on;
  }
  tb.every = (uint32_t)tb_every;
  tb.max_depth = (uint32_t)tb_depth;
  if (self->t) {
    Py_DECREF(path);
    PyErr_SetString(EtrError, self->closed || self->closing
                                  ? "this Trace was opened before: make a new one"
                                  : "this Trace is open already");
    return -1;
  }
  etr_trace_options o = ETR_TRACE_OPTIONS_INIT;
  o.no_timing = no_timing;
  o.ns_timing = ns_timing;
  o.flush_ms = (uint32_t)flush_ms;
  o.ring_mb = (uint32_t)ring_mb;
  o.traceback = &tb;
  o.fatal_signals = signals != 0;
  if (!strcmp(schema, "1.1.0")) {
    o.schema = ETR_SCHEMA_1_1_0;
  } else if (strcmp(schema, "1.1.1") != 0) {
    Py_DECREF(path);
    PyErr_Format(PyExc_ValueError, "schema must be \"1.1.1\" or \"1.1.0\", not \"%s\"", schema);
    return -1;
  }
  int rc, err = 0;
  Py_BEGIN_ALLOW_THREADS rc = etr_trace_open(PyBytes_AS_STRING(path), &o, &self->t);
  err = errno; /* (the system's reason when the file could not be made) */
  Py_END_ALLOW_THREADS if (rc != 0) {
    self->t = NULL;
    /* (the path as the caller wrote it, not the bytes it was encoded to) */
    PyObject *shown = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
    /* (the one trace a process has is often ETR_TRACE's: say so, and what to do) */
    const char *why = rc == ETR_EBUSY && etr_trace_current()
                          ? "; this process is recorded through ETR_TRACE already (one trace at "
                            "a time: unset ETR_TRACE to open your own)"
                          : "";
    if (rc == ETR_EOPEN && err) { /* the system's reason too: "No such file or directory" */
      PyErr_Format(EtrError, "cannot open trace %R: %s (%s): %s%s", shown ? shown : path,
                   etr_strerror(rc), etr_err_name(rc), strerror(err),
                   err == EBUSY   ? " (another process is writing it: give each process its "
                                    "own file, e.g. with %p or %r in the name)"
                   : err == ENXIO ? " (a FIFO that no process reads: start its reader first; "
                                    "etr does not wait for one)"
                                  : "");
      /* (the exception's errno attribute, as OSError's, for a caller that picks another
       * name: python -m etr) */
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyErr_NormalizeException(&type, &value, &tb);
      if (value) {
        PyObject *no = PyLong_FromLong(err);
        if (!no || PyObject_SetAttrString(value, "errno", no) < 0) PyErr_Clear();
        Py_XDECREF(no);
      }
      PyErr_Restore(type, value, tb);
    } else
      PyErr_Format(EtrError, "cannot open trace %R: %s (%s)%s", shown ? shown : path,
                   etr_strerror(rc), etr_err_name(rc), why);
    Py_XDECREF(shown);
    Py_DECREF(path);
    return -1;
  }
  Py_XSETREF(self->path, PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path)));
  Py_DECREF(path);
  self->closed = false;
  return 0;
}

static bool trace_usable(TraceObject *self) {
  if (self->t && !self->closed && !self->closing) return true;
  PyErr_SetString(EtrError, !self->t ? "the trace was never opened" : "the trace is closed");
  return false;
}

/* Waits (the GIL released) until the thread that is closing self has closed it. */
static void wait_closed(TraceObject *self) {
  while (self->closing && !self->closed) {
    Py_BEGIN_ALLOW_THREADS usleep(1000);
    Py_END_ALLOW_THREADS
  }
}

static PyObject *Trace_enable(TraceObject *self, PyObject *unused) {
  (void)unused;
  if (!trace_usable(self)) return NULL;
  int rc = etr_trace_enable(self->t);
  return rc ? etr_fail(rc, "enable") : Py_NewRef(Py_None);
}

static PyObject *Trace_disable(TraceObject *self, PyObject *unused) {
  (void)unused;
  if (!trace_usable(self)) return NULL;
  int rc = etr_trace_disable(self->t);
  return rc ? etr_fail(rc, "disable") : Py_NewRef(Py_None);
}

static PyObject *Trace_flush(TraceObject *self, PyObject *unused) {
  (void)unused;
  if (!trace_usable(self)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = etr_trace_flush(self->t);
  Py_END_ALLOW_THREADS return rc ? etr_fail(rc, "flush") : Py_NewRef(Py_None);
}

static PyObject *Trace_dump(TraceObject *self, PyObject *unused) {
  (void)unused;
  if (!trace_usable(self)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = etr_trace_dump(self->t);
  Py_END_ALLOW_THREADS return rc ? etr_fail(rc, "dump") : Py_NewRef(Py_None);
}

static PyObject *Trace_stats(TraceObject *self, PyObject *unused) {
  (void)unused;
  wait_closed(self);
  if (self->closed) return stats_dict(&self->last);
  if (!trace_usable(self)) return NULL;
  etr_trace_stats s = {.struct_size = sizeof s};
  int rc = etr_trace_stats_get(self->t, &s);
  return rc ? etr_fail(rc, "stats") : stats_dict(&s);
}

/* Closing waits for the writer thread: the GIL is released meanwhile, so that Python
 * threads still recording can finish their ops. */
/* Closing waits for the writer thread: the GIL is released meanwhile, so that Python
 * threads still recording can finish their ops. Another thread that closes it meanwhile
 * waits for that close and gets the same result (closing is claimed under the GIL). */
static PyObject *Trace_close(TraceObject *self, PyObject *unused) {
  (void)unused;
  wait_closed(self);
  if (!self->closed) {
    if (!trace_usable(self)) return NULL;
    self->closing = true;
    etr_trace_stats s = {.struct_size = sizeof s};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = etr_trace_close_stats(self->t, &s);
    Py_END_ALLOW_THREADS self->last = s;
    self->close_rc = rc;
    self->closed = true;
  }
  if (self->close_rc) return etr_fail(self->close_rc, "close");
  return stats_dict(&self->last);
}

static void Trace_dealloc(TraceObject *self) {
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
  if (self->t && !self->closed && !self->closing) {
    Py_BEGIN_ALLOW_THREADS etr_trace_close(self->t);
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(self->path);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Trace_get_closed(TraceObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->closed || !self->t);
}

static PyObject *Trace_get_path(TraceObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->path ? self->path : Py_None);
}

static PyMethodDef Trace_methods[] = {
    {"enable", (PyCFunction)Trace_enable, METH_NOARGS, "Start recording."},
    {"disable", (PyCFunction)Trace_disable, METH_NOARGS, "Stop recording."},
    {"flush", (PyCFunction)Trace_flush, METH_NOARGS, "Write what is buffered."},
    {"dump", (PyCFunction)Trace_dump, METH_NOARGS,
     "Flight recorder (ring_mb): write the ring as a complete trace now, replacing the file."},
    {"stats", (PyCFunction)Trace_stats, METH_NOARGS, "The counters (a dict)."},
    {"close", (PyCFunction)Trace_close, METH_NOARGS,
     "Finish the file; returns the final counters (a dict)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Trace_getset[] = {
    {"closed", (getter)Trace_get_closed, NULL, "True once closed.", NULL},
    {"path", (getter)Trace_get_path, NULL, "The trace file.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject TraceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "etr._etr.Trace",
    .tp_basicsize = sizeof(TraceObject),
    .tp_weaklistoffset = offsetof(TraceObject, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An execution trace being written (opened disabled; see etr.trace).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Trace_init,
    .tp_dealloc = (destructor)Trace_dealloc,
    .tp_methods = Trace_methods,
    .tp_getset = Trace_getset,
};

/* ---- Op ---- */

typedef struct {
  PyObject_HEAD etr_record rec; /* at a fixed address for its whole life (a heap object) */
  PyObject *name;               /* keeps the UTF-8 of the name alive */
  PyObject *schema;
  PyObject *inputs;
  int scope;
  int state; /* 0 made, 1 begun, 2 ended */
  unsigned long thread;
} OpObject;

/* Whether s can be passed as a C string: UTF-8 without NUL (a name would end there, where a
 * value keeps it); else a ValueError or UnicodeEncodeError naming what (now, not at begin). */
static bool c_string_ok(PyObject *s, const char *what) {
  Py_ssize_t len;
  const char *u = PyUnicode_AsUTF8AndSize(s, &len);
  if (!u) return false;
  if (strlen(u) == (size_t)len) return true;
  PyErr_Format(PyExc_ValueError, "%s holds a NUL character", what);
  return false;
}

static int Op_init(OpObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "inputs", "scope", "schema", NULL};
  PyObject *name, *inputs = NULL, *schema = NULL;
  int scope = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O$iO", kwlist, &name, &inputs, &scope, &schema))
    return -1;
  if (schema == Py_None) schema = NULL;
  if (inputs == Py_None) inputs = NULL;
  if (inputs && !PyList_Check(inputs) && !PyTuple_Check(inputs)) {
    /* (now, traced or not: found at begin only when traced, it failed only then) */
    PyErr_SetString(PyExc_TypeError, "inputs and outputs must be a list or a tuple");
    return -1;
  }
  if (schema && !PyUnicode_Check(schema)) {
    PyErr_SetString(PyExc_TypeError, "schema must be a str or None");
    return -1;
  }
  if (!c_string_ok(name, "the op's name") || (schema && !c_string_ok(schema, "the op's schema")))
    return -1;
  if (scope < 0 || scope >= ETR_SCOPE_COUNT) {
    PyErr_Format(PyExc_ValueError, "scope must be 0..%d", ETR_SCOPE_COUNT - 1);
    return -1;
  }
  if (self->state == 1) {
    PyErr_SetString(EtrError, "this op has begun and not ended");
    return -1;
  }
  Py_XSETREF(self->name, Py_NewRef(name));
  Py_XSETREF(self->schema, Py_XNewRef(schema));
  Py_XSETREF(self->inputs, Py_XNewRef(inputs));
  self->scope = scope;
  self->state = 0;
  return 0;
}

static PyObject *Op_begin(OpObject *self, PyObject *unused) {
  (void)unused;
  if (self->state != 0) {
    PyErr_SetString(EtrError, self->state == 1 ? "the op has begun already" : "the op ended");
    return NULL;
  }
  const char *name = self->name ? PyUnicode_AsUTF8(self->name) : "";
  if (!name) return NULL;
  etr_record_init(&self->rec, name, (etr_scope)self->scope);
  vtree t = {0};
  if (etr_record_is_active(&self->rec)) {
    if (self->schema) {
      self->rec.schema = PyUnicode_AsUTF8(self->schema);
      if (!self->rec.schema) return NULL;
    }
    if (etr_record_needs_inputs(&self->rec)) {
      size_t n;
      if (convert_all(&t, self->inputs, &n) < 0) {
        vt_free(&t);
        return NULL;
      }
      self->rec.inputs = t.vals;
      self->rec.n_inputs = (uint32_t)n;
    }
  }
  self->thread = PyThread_get_thread_ident();
  etr_record_begin(&self->rec);
  self->rec.inputs = NULL;
  self->rec.n_inputs = 0;
  vt_free(&t);
  self->state = 1;
  return Py_NewRef((PyObject *)self);
}

/* block: the end of a `with` block, which may come on another thread than its begin (a
 * generator resumed or closed there): then etr is told all the same (it counts the end in
 * ends_cross_thread and leaves the op to its own thread) and nothing is raised, where
 * end() raises EtrError. */
static PyObject *op_end(OpObject *self, PyObject *outputs, bool failed, bool block) {
  if (self->state != 1) {
    PyErr_SetString(EtrError, self->state == 0 ? "the op has not begun" : "the op ended already");
    return NULL;
  }
  if (!block && self->thread != PyThread_get_thread_ident()) {
    PyErr_SetString(EtrError, "an op must end on the thread it began on");
    return NULL;
  }
  vtree t = {0};
  bool bad_outputs = false;
  if (outputs && outputs != Py_None && !PyList_Check(outputs) && !PyTuple_Check(outputs)) {
    /* (checked whether observed or not: the caller's mistake shows in any run) */
    PyErr_SetString(PyExc_TypeError, "outputs must be a list or a tuple");
    bad_outputs = failed = true;
  } else if (!failed && etr_record_needs_outputs(&self->rec)) {
    size_t n;
    if (convert_all(&t, outputs, &n) < 0) {
      vt_free(&t);
      bad_outputs = failed = true; /* ended anyway, failed (never left open); then raised */
    } else {
      self->rec.outputs = t.vals;
      self->rec.n_outputs = (uint32_t)n;
    }
  }
  if (failed)
    etr_record_end_failed(&self->rec);
  else
    etr_record_end(&self->rec);
  self->rec.outputs = NULL;
  self->rec.n_outputs = 0;
  vt_free(&t);
  self->state = 2;
  if (bad_outputs) return NULL;
  Py_RETURN_NONE;
}

static PyObject *Op_end(OpObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"outputs", "failed", NULL};
  PyObject *outputs = NULL;
  int failed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$p", kwlist, &outputs, &failed)) return NULL;
  return op_end(self, outputs, failed != 0, false);
}

static PyObject *Op_enter(OpObject *self, PyObject *unused) { return Op_begin(self, unused); }

static PyObject *Op_exit(OpObject *self, PyObject *args) {
  PyObject *et = Py_None, *ev = Py_None, *tb = Py_None;
  if (!PyArg_UnpackTuple(args, "__exit__", 0, 3, &et, &ev, &tb)) return NULL;
  PyObject *r = op_end(self, NULL, et != Py_None, true);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *Op_active(OpObject *self, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(self->state == 1 && etr_record_is_active(&self->rec));
}

static void Op_dealloc(OpObject *self) {
  /* An op dropped while open (a generator never resumed, say) ends here, as failed, on its
   * own thread only; on another thread it stays open until its thread exits or the trace
   * closes (written marked incomplete). */
  if (self->state == 1 && self->thread == PyThread_get_thread_ident())
    etr_record_end_failed(&self->rec);
  Py_XDECREF(self->name);
  Py_XDECREF(self->schema);
  Py_XDECREF(self->inputs);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Op_methods[] = {
    {"begin", (PyCFunction)Op_begin, METH_NOARGS, "The op starts (inputs are read now)."},
    {"end", (PyCFunction)(void (*)(void))Op_end, METH_VARARGS | METH_KEYWORDS,
     "end(outputs=(), *, failed=False): the op ends."},
    {"active", (PyCFunction)Op_active, METH_NOARGS, "True while begun and observed."},
    {"__enter__", (PyCFunction)Op_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Op_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject OpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "etr._etr.Op",
    .tp_basicsize = sizeof(OpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Op(name, inputs=(), *, scope=0, schema=None): one operator call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Op_init,
    .tp_dealloc = (destructor)Op_dealloc,
    .tp_methods = Op_methods,
};

static PyObject *mod_thread_set_name(PyObject *m, PyObject *arg) {
  (void)m;
  if (!PyUnicode_Check(arg))
    return PyErr_Format(PyExc_TypeError, "thread_set_name takes a str, not %.100s",
                        Py_TYPE(arg)->tp_name);
  if (!c_string_ok(arg, "the thread name")) return NULL;
  const char *s = PyUnicode_AsUTF8(arg);
  if (!s) return NULL;
  int rc = etr_thread_set_name(s);
  return rc ? etr_fail(rc, "thread_set_name") : Py_NewRef(Py_None);
}

static PyObject *mod_thread_id(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return PyLong_FromUnsignedLongLong(etr_thread_id());
}

static PyObject *mod_python_frames(PyObject *m, PyObject *arg) {
  (void)m;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  if (!on) {
    etr_py_frames_unregister();
    Py_RETURN_FALSE;
  }
  const char *why = NULL;
  int rc = etr_py_frames_register(&why);
  if (rc == ETR_PY_FRAMES_ERROR)
    return PyErr_Format(EtrError, "cannot register the Python-frame unwinder: %s", why);
  return PyBool_FromLong(rc >= 0);
}

static PyObject *mod_env_trace_open(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return PyBool_FromLong(etr_trace_current() != NULL);
}

/* For a forked child about to end with os._exit (etr/__init__.py): what exit's destructor
 * would do for the ETR_TRACE trace, without which the child loses every op the writer had
 * not flushed yet. The parent's copy (a child that has not recorded) answers the flush
 * ETR_EFORKED and is left alone: closing it would free what the child's first record
 * reads to keep off the parent's file (env.c). */
static PyObject *mod_close_env_trace(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  etr_trace *tr = etr_trace_current();
  int rc = ETR_EFORKED;
  if (tr) {
    Py_BEGIN_ALLOW_THREADS rc = etr_trace_flush(tr);
    if (rc != ETR_EFORKED) rc = etr_trace_close(tr);
    Py_END_ALLOW_THREADS
  }
  return PyBool_FromLong(rc != ETR_EFORKED);
}

static PyMethodDef mod_methods[] = {
    {"python_frames", mod_python_frames, METH_O,
     "python_frames(on): put Python frames into tracebacks (CPython 3.11); True when they "
     "are."},
    {"profile", etr_py_profile, METH_VARARGS,
     "profile(on, pass_prefix=None): record each Python function call of the calling thread "
     "as an op (and of every thread on Python 3.12+), but generators' and coroutines' frames "
     "and those of code files under pass_prefix; off: the calls still open end, and the "
     "thread's previous profile function is back."},
    {"thread_set_name", mod_thread_set_name, METH_O, "Name the calling thread in traces."},
    {"set_rank", etr_py_set_rank, METH_VARARGS,
     "set_rank(rank, world_size): this process's rank of a distributed run (else the "
     "launcher's RANK / WORLD_SIZE); traces record it in their process-group node."},
    {"declare_group", (PyCFunction)(void (*)(void))etr_py_declare_group,
     METH_VARARGS | METH_KEYWORDS,
     "declare_group(name, ranks=None, *, desc=None, backend=None): a process group (ranks: "
     "its members' global ranks in group-rank order; None: every rank), listed in the "
     "trace's process-group node."},
    {"record_groups", etr_py_record_groups, METH_NOARGS,
     "record_groups(): record the process-group node now (into the enabled trace)."},
    {"rank", etr_py_rank, METH_NOARGS, "This process's rank (set_rank's, else the launcher's)."},
    {"world_size", etr_py_world_size, METH_NOARGS, "The world size (as rank())."},
    {"thread_id", mod_thread_id, METH_NOARGS, "etr's logical id of the calling thread."},
    {"env_trace_open", mod_env_trace_open, METH_NOARGS,
     "env_trace_open(): whether ETR_TRACE opened a trace (in a forked child: the parent's "
     "too)."},
    {"close_env_trace", mod_close_env_trace, METH_NOARGS,
     "close_env_trace(): finalize this process's own ETR_TRACE trace now, as exit does; "
     "False when there is none (a forked child's copy of its parent's is left alone)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef mod_def = {PyModuleDef_HEAD_INIT, .m_name = "_etr",
                                     .m_doc = "libetr for Python (see the etr package).",
                                     .m_size = -1, .m_methods = mod_methods};

PyMODINIT_FUNC PyInit__etr(void) {
  if (PyType_Ready(&TraceType) < 0 || PyType_Ready(&OpType) < 0) return NULL;
  if (etr_py_calls_init() != 0) return PyErr_NoMemory();
  etr_py_dist_init(etr_fail);
  PyObject *m = PyModule_Create(&mod_def);
  if (!m) return NULL;
  EtrError = PyErr_NewException("etr.EtrError", PyExc_RuntimeError, NULL);
  if (!EtrError || PyModule_AddObject(m, "EtrError", Py_NewRef(EtrError)) < 0 ||
      PyModule_AddObject(m, "Trace", Py_NewRef((PyObject *)&TraceType)) < 0 ||
      PyModule_AddObject(m, "Op", Py_NewRef((PyObject *)&OpType)) < 0 ||
      PyModule_AddStringConstant(m, "version", ETR_VERSION_STRING) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
