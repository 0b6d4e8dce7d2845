/* Python function calls as ops, for the etr package's python_calls (python_calls.h). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>

#include "etr/etr.h"

#include "python_calls.h"

/* Each thread's open call records, in a thread-local stack (records must not move while
 * open). Calls deeper than the stack are not recorded. A frame is passed through (no op;
 * its calls still are) when it is a generator's or a coroutine's, whose every yield is a
 * return to the profiler, so that an op the user opened inside it and that spans a yield
 * is not closed there, or when it is the etr package's own (trace.__exit__, which turns the
 * profile off before it returns). A context manager's __enter__ / __exit__ is skipped with
 * every call inside it (is_cm_method). */
#define PROF_DEPTH 256
#define PROF_PASS_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)
typedef struct prof_stack {
  etr_record rec[PROF_DEPTH];
  bool recorded[PROF_DEPTH]; /* (false: passed through) */
  unsigned depth, skipped;
  Py_tracefunc prev_func; /* the thread's profile function before ours (sys.setprofile, */
  PyObject *prev_obj;     /* cProfile), put back when the profile is turned off */
} prof_stack;

static _Thread_local prof_stack *prof;
static pthread_key_t prof_key;     /* frees a thread's stack when the thread exits */
static int prof_on;                /* (the GIL guards it) */
static PyObject *prof_pass_prefix; /* code files under it are passed through (etr's own) */

static void prof_free(void *p) {
  if (prof == p) prof = NULL;
  PyMem_RawFree(p); /* (a prev_obj still held is left: no GIL at thread exit) */
}

static prof_stack *prof_stack_get(void) {
  if (!prof) {
    prof = PyMem_RawCalloc(1, sizeof *prof);
    if (prof) pthread_setspecific(prof_key, prof);
  }
  return prof;
}

static int prof_fn(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* A context manager's __enter__ / __exit__ (and __aenter__ / __aexit__) is not an op, nor is
 * any call inside it: an annotation begins its op in __enter__ and ends it in __exit__
 * (torch.profiler.record_function, a class around etr.Op, etr.record_function inside a
 * @contextlib.contextmanager), and ops nest per thread, so a call op around either would
 * end with the annotation still open inside it (written incomplete, its block's calls
 * after it) or be left open by its end. */
static PyObject *cm_names[4]; /* (interned at init) */

static bool is_cm_method(PyObject *name) {
  if (!name) return false;
  for (size_t i = 0; i < sizeof cm_names / sizeof cm_names[0]; i++)
    if (name == cm_names[i]) return true;
  /* (names are interned by the compiler; one that is not, made by hand, is compared) */
  if (PyUnicode_CHECK_INTERNED(name) || PyUnicode_GET_LENGTH(name) < 9) return false;
  for (size_t i = 0; i < sizeof cm_names / sizeof cm_names[0]; i++)
    if (cm_names[i] && PyUnicode_Compare(name, cm_names[i]) == 0) return true;
  return false;
}

/* The calling thread stops recording its calls: the calls still open end now (complete,
 * innermost first) and its previous profile function is back. */
static void prof_uninstall(void) {
  prof_stack *ps = prof;
  Py_tracefunc f = ps ? ps->prev_func : NULL;
  PyObject *o = ps ? ps->prev_obj : NULL;
  if (ps) {
    while (ps->depth) {
      unsigned d = --ps->depth;
      if (ps->recorded[d]) etr_record_end(&ps->rec[d]);
    }
    ps->skipped = 0;
    ps->prev_func = NULL;
    ps->prev_obj = NULL;
  }
  if (PyThreadState_Get()->c_profilefunc == prof_fn)
    PyEval_SetProfile(f, o); /* (takes its own reference) */
  Py_XDECREF(o);
}

static int prof_fn(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
  (void)obj;
  if (!prof_on) { /* turned off from another thread: this one lets go at its next event */
    prof_uninstall();
    return 0;
  }
  if (what == PyTrace_CALL) {
    prof_stack *ps = prof_stack_get();
    if (!ps) return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    if (ps->depth >= PROF_DEPTH || ps->skipped || (code && is_cm_method(code->co_name))) {
      ps->skipped++;
      Py_XDECREF(code);
      return 0;
    }
    bool pass =
        code && ((code->co_flags & PROF_PASS_FLAGS) ||
                 (prof_pass_prefix && PyUnicode_Tailmatch(code->co_filename, prof_pass_prefix, 0,
                                                          PY_SSIZE_T_MAX, -1) == 1));
    unsigned d = ps->depth++;
    ps->recorded[d] = !pass;
    if (!pass) {
#if PY_VERSION_HEX >= 0x030B0000
      const char *name = code ? PyUnicode_AsUTF8(code->co_qualname) : NULL;
#else
      const char *name = code ? PyUnicode_AsUTF8(code->co_name) : NULL;
#endif
      if (!name) PyErr_Clear();
      etr_record_init(&ps->rec[d], name ? name : "?", ETR_SCOPE_USER_SCOPE);
      etr_record_begin(&ps->rec[d]);
    }
    Py_XDECREF(code);
  } else if (what == PyTrace_RETURN && prof) {
    if (prof->skipped) {
      prof->skipped--;
      return 0;
    }
    if (!prof->depth) return 0; /* (a frame entered before the profile was on) */
    unsigned d = --prof->depth;
    if (!prof->recorded[d])
      ;
    else if (arg == NULL) /* the frame is left by an exception */
      etr_record_end_failed(&prof->rec[d]);
    else
      etr_record_end(&prof->rec[d]);
  }
  return 0;
}

PyObject *etr_py_profile(PyObject *m, PyObject *args) {
  (void)m;
  int on;
  PyObject *pass_prefix = Py_None;
  if (!PyArg_ParseTuple(args, "p|O:profile", &on, &pass_prefix)) return NULL;
  if (pass_prefix != Py_None && !PyUnicode_Check(pass_prefix))
    return PyErr_Format(PyExc_TypeError, "profile: the prefix must be a str or None");
  if (!on) {
    prof_on = 0;
    prof_uninstall();
    Py_RETURN_NONE;
  }
  prof_stack *ps = prof_stack_get();
  if (!ps) return PyErr_NoMemory();
  Py_XSETREF(prof_pass_prefix, pass_prefix == Py_None ? NULL : Py_NewRef(pass_prefix));
  PyThreadState *ts = PyThreadState_Get();
  if (ts->c_profilefunc != prof_fn) { /* (the calling thread's: put back when off) */
    Py_XDECREF(ps->prev_obj);
    ps->prev_func = ts->c_profilefunc;
    ps->prev_obj = Py_XNewRef(ts->c_profileobj);
  }
  prof_on = 1;
#if PY_VERSION_HEX >= 0x030C0000
  PyEval_SetProfileAllThreads(prof_fn, NULL);
#else
  PyEval_SetProfile(prof_fn, NULL);
#endif
  Py_RETURN_NONE;
}

int etr_py_calls_init(void) {
  static bool made;
  if (!made && pthread_key_create(&prof_key, prof_free) != 0) return -1;
  made = true;
  static const char *const names[] = {"__enter__", "__exit__", "__aenter__", "__aexit__"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!cm_names[i] && !(cm_names[i] = PyUnicode_InternFromString(names[i]))) return -1;
  return 0;
}
