/* etrdemo — a CPython extension module whose functions are instrumented operators, and a
 * script unwinder that puts Python frames into etr's tracebacks.
 *
 * Python side:
 *   t = etrdemo.tensor([[1.0, 2.0], [3.0, 4.0]])   # or etrdemo.full(rows, cols, value)
 *   etrdemo.matmul(a, b), add(a, b), relu(a), scale(a, s), sum(a)   # recorded ops
 *   etrdemo.apply(fn, a)    # recorded op that calls back into Python: fn(a)
 *   etrdemo.open(path, traceback=True, pattern=None, every=0, depth=0); ...; etrdemo.close()
 *
 * Each op is one etr_record (name "etrdemo::<op>", schema, tensor inputs and outputs). A
 * tensor is a small row-major matrix of doubles: its impl identity is the Python object, its
 * storage identity the data buffer; dealloc tells etr both died.
 *
 * The script unwinder that puts Python frames between the native ones is the etr package's
 * (integrations/python/cpython_frames.c: CPython 3.11); it is registered at import and
 * unregistered by an atexit handler (which also closes a trace opened with etrdemo.open),
 * while the interpreter can still take references back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cpython_frames.h"

#include <stdint.h>
#include <string.h>

#include <etr/etr.h>

/* ---- the tensor type ---- */

typedef struct {
  PyObject_HEAD int64_t rows, cols;
  double *data;
} TensorObject;

static PyTypeObject TensorType;

static TensorObject *tensor_new_empty(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || (rows && cols > INT64_MAX / 8 / rows)) {
    PyErr_SetString(PyExc_ValueError, "bad tensor shape");
    return NULL;
  }
  TensorObject *t = PyObject_New(TensorObject, &TensorType);
  if (!t) return NULL;
  t->rows = rows;
  t->cols = cols;
  int64_t n = rows * cols;
  t->data = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!t->data) {
    Py_DECREF(t);
    return (TensorObject *)PyErr_NoMemory();
  }
  return t;
}

static void tensor_dealloc(TensorObject *t) {
  etr_tensor_died(t);
  etr_storage_died(t->data);
  PyMem_Free(t->data);
  PyObject_Free(t);
}

static PyObject *tensor_tolist(TensorObject *t, PyObject *unused) {
  (void)unused;
  PyObject *rows = PyList_New((Py_ssize_t)t->rows);
  if (!rows) return NULL;
  for (int64_t i = 0; i < t->rows; i++) {
    PyObject *row = PyList_New((Py_ssize_t)t->cols);
    if (!row) {
      Py_DECREF(rows);
      return NULL;
    }
    for (int64_t j = 0; j < t->cols; j++) {
      PyObject *v = PyFloat_FromDouble(t->data[i * t->cols + j]);
      if (!v) {
        Py_DECREF(row);
        Py_DECREF(rows);
        return NULL;
      }
      PyList_SET_ITEM(row, (Py_ssize_t)j, v);
    }
    PyList_SET_ITEM(rows, (Py_ssize_t)i, row);
  }
  return rows;
}

static PyObject *tensor_shape(TensorObject *t, void *closure) {
  (void)closure;
  return Py_BuildValue("(LL)", (long long)t->rows, (long long)t->cols);
}

static PyMethodDef tensor_methods[] = {
    {"tolist", (PyCFunction)tensor_tolist, METH_NOARGS, "The values as a list of rows."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tensor_getset[] = {{"shape", (getter)tensor_shape, NULL, "(rows, cols)", NULL},
                                      {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "etrdemo.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A row-major matrix of doubles (make one with etrdemo.tensor or etrdemo.full).",
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
};

static TensorObject *as_tensor(PyObject *o, const char *what) {
  if (!PyObject_TypeCheck(o, &TensorType)) {
    PyErr_Format(PyExc_TypeError, "%s must be an etrdemo.Tensor", what);
    return NULL;
  }
  return (TensorObject *)o;
}

/* ---- recording helpers ---- */

/* The etr view of one tensor (sizes and strides live in the struct). */
typedef struct {
  etr_tensor t;
  int64_t sizes[2], strides[2];
} tview;

static etr_value tensor_value(tview *v, const TensorObject *t) {
  v->sizes[0] = t->rows;
  v->sizes[1] = t->cols;
  v->strides[0] = t->cols;
  v->strides[1] = 1;
  v->t.impl = t;
  v->t.storage = t->data;
  v->t.storage_offset = 0;
  v->t.numel = t->rows * t->cols;
  v->t.itemsize = (int64_t)sizeof(double);
  v->t.dtype = "double";
  v->t.device = "cpu";
  v->t.ndim = 2;
  v->t.sizes = v->sizes;
  v->t.strides = v->strides;
  return etr_value_tensor(&v->t);
}

/* One recorded op: the record, its input and output values. */
typedef struct {
  etr_record rec;
  tview tv[3];
  etr_value in[3], out[1];
} op;

static void op_begin(op *o, const char *name, const char *schema, const TensorObject *a,
                     const TensorObject *b, const etr_value *extra) {
  etr_record_init(&o->rec, name, ETR_SCOPE_FUNCTION);
  if (etr_record_is_active(&o->rec)) {
    o->rec.schema = schema;
    if (etr_record_needs_inputs(&o->rec)) {
      uint32_t n = 0;
      if (a) o->in[n++] = tensor_value(&o->tv[0], a);
      if (b) o->in[n++] = tensor_value(&o->tv[1], b);
      if (extra) o->in[n++] = *extra;
      o->rec.inputs = o->in;
      o->rec.n_inputs = n;
    }
  }
  etr_record_begin(&o->rec);
}

static void op_end(op *o, PyObject *result) {
  if (etr_record_needs_outputs(&o->rec) && result) {
    if (PyObject_TypeCheck(result, &TensorType))
      o->out[0] = tensor_value(&o->tv[2], (TensorObject *)result);
    else if (PyFloat_Check(result))
      o->out[0] = etr_value_double(PyFloat_AS_DOUBLE(result));
    else
      o->out[0] = etr_value_object("PyObject");
    o->rec.outputs = o->out;
    o->rec.n_outputs = 1;
  }
  etr_record_end(&o->rec);
}

/* ---- the operators ---- */

static PyObject *etrdemo_matmul(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pa, *pb;
  if (!PyArg_ParseTuple(args, "OO:matmul", &pa, &pb)) return NULL;
  TensorObject *a = as_tensor(pa, "a"), *b = as_tensor(pb, "b");
  if (!a || !b) return NULL;
  if (a->cols != b->rows) {
    PyErr_SetString(PyExc_ValueError, "matmul: shapes do not match");
    return NULL;
  }
  op o;
  op_begin(&o, "etrdemo::matmul", "etrdemo::matmul(Tensor self, Tensor other) -> Tensor", a, b,
           NULL);
  TensorObject *r = tensor_new_empty(a->rows, b->cols);
  if (r) {
    for (int64_t i = 0; i < a->rows; i++)
      for (int64_t k = 0; k < a->cols; k++) {
        double x = a->data[i * a->cols + k];
        for (int64_t j = 0; j < b->cols; j++)
          r->data[i * b->cols + j] += x * b->data[k * b->cols + j];
      }
  }
  op_end(&o, (PyObject *)r);
  return (PyObject *)r;
}

static PyObject *etrdemo_add(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pa, *pb;
  if (!PyArg_ParseTuple(args, "OO:add", &pa, &pb)) return NULL;
  TensorObject *a = as_tensor(pa, "a"), *b = as_tensor(pb, "b");
  if (!a || !b) return NULL;
  /* b broadcasts over rows when it has one row. */
  if (a->cols != b->cols || (b->rows != a->rows && b->rows != 1)) {
    PyErr_SetString(PyExc_ValueError, "add: shapes do not match");
    return NULL;
  }
  op o;
  op_begin(&o, "etrdemo::add", "etrdemo::add(Tensor self, Tensor other) -> Tensor", a, b, NULL);
  TensorObject *r = tensor_new_empty(a->rows, a->cols);
  if (r) {
    for (int64_t i = 0; i < a->rows; i++)
      for (int64_t j = 0; j < a->cols; j++)
        r->data[i * a->cols + j] =
            a->data[i * a->cols + j] + b->data[(b->rows == 1 ? 0 : i) * b->cols + j];
  }
  op_end(&o, (PyObject *)r);
  return (PyObject *)r;
}

static PyObject *etrdemo_relu(PyObject *self, PyObject *arg) {
  (void)self;
  TensorObject *a = as_tensor(arg, "a");
  if (!a) return NULL;
  op o;
  op_begin(&o, "etrdemo::relu", "etrdemo::relu(Tensor self) -> Tensor", a, NULL, NULL);
  TensorObject *r = tensor_new_empty(a->rows, a->cols);
  if (r)
    for (int64_t i = 0; i < a->rows * a->cols; i++) r->data[i] = a->data[i] > 0 ? a->data[i] : 0;
  op_end(&o, (PyObject *)r);
  return (PyObject *)r;
}

static PyObject *etrdemo_scale(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pa;
  double s;
  if (!PyArg_ParseTuple(args, "Od:scale", &pa, &s)) return NULL;
  TensorObject *a = as_tensor(pa, "a");
  if (!a) return NULL;
  etr_value sv = etr_value_double(s);
  op o;
  op_begin(&o, "etrdemo::scale", "etrdemo::scale(Tensor self, float s) -> Tensor", a, NULL, &sv);
  TensorObject *r = tensor_new_empty(a->rows, a->cols);
  if (r)
    for (int64_t i = 0; i < a->rows * a->cols; i++) r->data[i] = a->data[i] * s;
  op_end(&o, (PyObject *)r);
  return (PyObject *)r;
}

static PyObject *etrdemo_sum(PyObject *self, PyObject *arg) {
  (void)self;
  TensorObject *a = as_tensor(arg, "a");
  if (!a) return NULL;
  op o;
  op_begin(&o, "etrdemo::sum", "etrdemo::sum(Tensor self) -> float", a, NULL, NULL);
  double s = 0;
  for (int64_t i = 0; i < a->rows * a->cols; i++) s += a->data[i];
  PyObject *r = PyFloat_FromDouble(s);
  op_end(&o, r);
  return r;
}

/* An op that runs Python code: fn(a). Its nested ops' tracebacks cross two activations of
 * the interpreter with this C function between them. */
static PyObject *etrdemo_apply(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *fn, *pa;
  if (!PyArg_ParseTuple(args, "OO:apply", &fn, &pa)) return NULL;
  TensorObject *a = as_tensor(pa, "a");
  if (!a) return NULL;
  etr_value fv = etr_value_object("Callable");
  op o;
  op_begin(&o, "etrdemo::apply", "etrdemo::apply(Callable fn, Tensor self) -> Any", a, NULL, &fv);
  PyObject *r = PyObject_CallOneArg(fn, pa);
  op_end(&o, r);
  return r;
}

/* ---- tensors from Python ---- */

static PyObject *etrdemo_full(PyObject *self, PyObject *args) {
  (void)self;
  long long rows, cols;
  double v = 0;
  if (!PyArg_ParseTuple(args, "LL|d:full", &rows, &cols, &v)) return NULL;
  TensorObject *t = tensor_new_empty(rows, cols);
  if (t)
    for (int64_t i = 0; i < t->rows * t->cols; i++) t->data[i] = v;
  return (PyObject *)t;
}

static PyObject *etrdemo_tensor(PyObject *self, PyObject *rows) {
  (void)self;
  PyObject *seq = PySequence_Fast(rows, "tensor() takes a list of rows");
  if (!seq) return NULL;
  Py_ssize_t nr = PySequence_Fast_GET_SIZE(seq), nc = -1;
  TensorObject *t = NULL;
  for (Py_ssize_t i = 0; i < nr; i++) {
    PyObject *row = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "rows must be lists");
    if (!row) goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(row);
    if (!t) {
      nc = n;
      if (!(t = tensor_new_empty(nr, nc))) {
        Py_DECREF(row);
        goto fail;
      }
    }
    if (n != nc) {
      Py_DECREF(row);
      PyErr_SetString(PyExc_ValueError, "rows differ in length");
      goto fail;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
      double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(row, j));
      if (v == -1.0 && PyErr_Occurred()) {
        Py_DECREF(row);
        goto fail;
      }
      t->data[i * nc + j] = v;
    }
    Py_DECREF(row);
  }
  Py_DECREF(seq);
  return t ? (PyObject *)t : (PyObject *)tensor_new_empty(0, 0);
fail:
  Py_XDECREF(t);
  Py_DECREF(seq);
  return NULL;
}

/* ---- the script unwinder (integrations/python/cpython_frames.c) ---- */

static PyObject *etrdemo_register_unwinder(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  const char *why = NULL;
  int rc = etr_py_frames_register(&why);
  if (rc == ETR_PY_FRAMES_ERROR)
    return PyErr_Format(PyExc_RuntimeError, "etr_script_unwinder_register: %s", why);
  return PyBool_FromLong(rc == 1);
}

static PyObject *etrdemo_unregister_unwinder(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  etr_py_frames_unregister(); /* releases what etr holds, here (GIL held) */
  Py_RETURN_TRUE;
}

/* ---- trace control ---- */

static etr_trace *trace;
static char *trace_pattern;

static PyObject *stats_dict(const etr_trace_stats *s) {
  return Py_BuildValue("{sKsKsKsK}", "ops_recorded", (unsigned long long)s->ops_recorded,
                       "nodes_written", (unsigned long long)s->nodes_written, "tracebacks",
                       (unsigned long long)s->tracebacks, "tracebacks_unique",
                       (unsigned long long)s->tracebacks_unique);
}

/* The process-wide traceback counters (etr_traceback_stats_get) as a dict. */
static PyObject *etrdemo_traceback_stats(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  etr_traceback_stats tb = {0};
  tb.struct_size = sizeof tb;
  etr_traceback_stats_get(&tb);
  return Py_BuildValue("{sKsKsKsKsKsKsK}", "captures", (unsigned long long)tb.captures,
                       "frames_captured", (unsigned long long)tb.frames_captured,
                       "symbol_cache_misses", (unsigned long long)tb.symbol_cache_misses,
                       "symbolize_fallbacks", (unsigned long long)tb.symbolize_fallbacks,
                       "script_frames", (unsigned long long)tb.script_frames, "script_symbolized",
                       (unsigned long long)tb.script_symbolized, "script_released",
                       (unsigned long long)tb.script_released);
}

static PyObject *etrdemo_open(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"path", "traceback", "pattern", "every", "depth", "enable", NULL};
  const char *path, *pattern = NULL;
  int tb = 1, enable = 1;
  unsigned int every = 0, depth = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|pzIIp:open", kwlist, &path, &tb, &pattern, &every,
                                   &depth, &enable))
    return NULL;
  if (trace || etr_trace_current()) {
    PyErr_SetString(PyExc_RuntimeError, "a trace is open already");
    return NULL;
  }
  etr_trace_options opt = ETR_TRACE_OPTIONS_INIT;
  etr_traceback_options opt_tb = ETR_TRACEBACK_OPTIONS_INIT;
  opt.traceback = &opt_tb;
  opt_tb.enabled = tb != 0;
  free(trace_pattern);
  trace_pattern = pattern ? strdup(pattern) : NULL;
  opt_tb.pattern = trace_pattern;
  opt_tb.every = every;
  opt_tb.max_depth = depth;
  int rc = etr_trace_open(path, &opt, &trace);
  if (rc != 0) {
    trace = NULL;
    return PyErr_Format(PyExc_OSError, "etr_trace_open(%s): %s", path, etr_strerror(rc));
  }
  if (enable && (rc = etr_trace_enable(trace)) != 0)
    return PyErr_Format(PyExc_RuntimeError, "etr_trace_enable: %s", etr_strerror(rc));
  Py_RETURN_NONE;
}

static etr_trace *current(void) { return trace ? trace : etr_trace_current(); }

static PyObject *etrdemo_enable(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (current()) etr_trace_enable(current());
  Py_RETURN_NONE;
}

static PyObject *etrdemo_disable(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (current()) etr_trace_disable(current());
  Py_RETURN_NONE;
}

static PyObject *etrdemo_flush(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (current()) etr_trace_flush(current());
  Py_RETURN_NONE;
}

/* Close the trace opened with open(); returns its counters (None when none was open). The
 * GIL stays held: close releases deferred script frames here, and the writer thread it
 * waits for never calls Python. */
static PyObject *etrdemo_close(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!trace) Py_RETURN_NONE;
  etr_trace *t = trace;
  trace = NULL;
  etr_trace_stats s = {0};
  s.struct_size = sizeof s;
  int rc = etr_trace_close_stats(t, &s);
  if (rc != 0) return PyErr_Format(PyExc_OSError, "etr_trace_close: %s", etr_strerror(rc));
  return stats_dict(&s);
}

static PyObject *etrdemo_shutdown(PyObject *self, PyObject *unused) {
  PyObject *r = etrdemo_close(self, unused);
  if (!r) PyErr_Clear();
  Py_XDECREF(r);
  return etrdemo_unregister_unwinder(self, unused);
}

static PyMethodDef methods[] = {
    {"matmul", etrdemo_matmul, METH_VARARGS, "matmul(a, b): recorded as etrdemo::matmul."},
    {"add", etrdemo_add, METH_VARARGS, "add(a, b): recorded (b may be one row, broadcast)."},
    {"relu", etrdemo_relu, METH_O, "relu(a): recorded."},
    {"scale", etrdemo_scale, METH_VARARGS, "scale(a, s): recorded."},
    {"sum", etrdemo_sum, METH_O, "sum(a) -> float: recorded."},
    {"apply", etrdemo_apply, METH_VARARGS, "apply(fn, a) -> fn(a): recorded; fn may record."},
    {"full", etrdemo_full, METH_VARARGS, "full(rows, cols, value=0.0) -> Tensor."},
    {"tensor", etrdemo_tensor, METH_O, "tensor(rows) -> Tensor from a list of rows."},
    {"open", (PyCFunction)(void (*)(void))etrdemo_open, METH_VARARGS | METH_KEYWORDS,
     "open(path, traceback=True, pattern=None, every=0, depth=0, enable=True)"},
    {"enable", etrdemo_enable, METH_NOARGS, "Enable the open trace."},
    {"disable", etrdemo_disable, METH_NOARGS, "Disable the open trace."},
    {"flush", etrdemo_flush, METH_NOARGS, "Flush the open trace."},
    {"close", etrdemo_close, METH_NOARGS, "Close the trace opened with open(): its counters."},
    {"register_unwinder", etrdemo_register_unwinder, METH_NOARGS,
     "Register the Python-frame unwinder (done at import)."},
    {"unregister_unwinder", etrdemo_unregister_unwinder, METH_NOARGS,
     "Unregister it (done at exit)."},
    {"traceback_stats", etrdemo_traceback_stats, METH_NOARGS,
     "Process-wide traceback counters (captures, script frames gathered/released...)."},
    {"_shutdown", etrdemo_shutdown, METH_NOARGS, "atexit: close the trace, unregister."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "etrdemo",
                                    "Instrumented operators on small tensors (etr example).",
                                    -1,
                                    methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit_etrdemo(void) {
  if (PyType_Ready(&TensorType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&TensorType);
  if (PyModule_AddObject(m, "Tensor", (PyObject *)&TensorType) < 0) goto fail;
  PyObject *r = etrdemo_register_unwinder(m, NULL);
  if (!r) goto fail;
  Py_DECREF(r);
  /* Unregister while the interpreter still runs (a C destructor would be too late). */
  PyObject *atexit = PyImport_ImportModule("atexit");
  if (!atexit) goto fail;
  PyObject *fn = PyObject_GetAttrString(m, "_shutdown");
  PyObject *ok = fn ? PyObject_CallMethod(atexit, "register", "O", fn) : NULL;
  Py_XDECREF(fn);
  Py_DECREF(atexit);
  if (!ok) goto fail;
  Py_DECREF(ok);
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
