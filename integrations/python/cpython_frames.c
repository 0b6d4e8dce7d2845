/* The CPython script unwinder (cpython_frames.h).
 *
 * - gather walks tstate->cframe->current_frame -> previous, innermost first, skipping
 *   incomplete frames as CPython's own tracebacks do. A handle is the code object pointer
 *   with the frame's instruction index in bits 47..63 (user-space pointers fit in 47 bits
 *   on x86-64/arm64 Linux; a larger index is clamped, so the line may be off in a function
 *   of more than 131071 code units). gather takes one reference on the code object per
 *   handle; frames flagged is_entry (the first frame run by one _PyEval_EvalFrameDefault
 *   activation) get ETR_SCRIPT_FRAME_ENTRY. No allocation, no line computation.
 * - symbolize gives co_qualname, co_filename and PyCode_Addr2Line of the instruction.
 * - release drops the references under PyGILState_Ensure (reentrant when the GIL is held),
 *   so it may run on any thread; release_in_record is true (ops run holding the GIL).
 * - The entry function is _PyEval_EvalFrameDefault (exported by Debian's python3.11 and by
 *   libpython3.11.so).
 * Register it at import and unregister it from an atexit handler, while the interpreter can
 * still take references back.
 *
 * Caveat (documented, not handled): a release may drop the last reference of a code object;
 * if a weakref callback on that code object then ran Python code that released the GIL
 * while another thread closed the trace holding the GIL, close would wait for this thread's
 * callback while this thread waited for the GIL.
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE_MODULE 1
#include <Python.h>

#include "cpython_frames.h"

#include <stdint.h>

#include <etr/etr.h>

static int registered;

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_frame.h"

#define CODE_BITS 47
#define CODE_MASK (((uintptr_t)1 << CODE_BITS) - 1)
#define LASTI_MAX (((uintptr_t)1 << (64 - CODE_BITS)) - 1)

static size_t py_gather(uintptr_t *handles, uint8_t *flags, size_t max, void *user) {
  (void)user;
  /* Only with the GIL held can the frame chain be read safely. */
  if (!PyGILState_Check()) return 0;
  PyThreadState *ts = _PyThreadState_UncheckedGet();
  if (!ts || !ts->cframe) return 0;
  size_t n = 0;
  for (_PyInterpreterFrame *f = ts->cframe->current_frame; f && n < max; f = f->previous) {
    if (_PyFrame_IsIncomplete(f) || (uintptr_t)f->f_code > CODE_MASK) {
      /* Keep the activation boundary on the frame inside it. */
      if (f->is_entry && n > 0 && !(flags[n - 1] & ETR_SCRIPT_FRAME_ENTRY))
        flags[n - 1] |= ETR_SCRIPT_FRAME_ENTRY;
      continue;
    }
    int lasti = _PyInterpreterFrame_LASTI(f);
    uintptr_t li = lasti < 0 ? 0 : (uintptr_t)lasti > LASTI_MAX ? LASTI_MAX : (uintptr_t)lasti;
    Py_INCREF(f->f_code);
    handles[n] = (uintptr_t)f->f_code | (li << CODE_BITS);
    flags[n] = f->is_entry ? ETR_SCRIPT_FRAME_ENTRY : 0;
    n++;
  }
  return n;
}

static const char *utf8_of(PyObject *s) {
  const char *u = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
  if (!u) PyErr_Clear();
  return u ? u : "?";
}

static int py_symbolize(uintptr_t h, etr_script_frame *out, void *user) {
  (void)user;
  PyCodeObject *co = (PyCodeObject *)(h & CODE_MASK);
  int lasti = (int)(h >> CODE_BITS);
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb); /* keep an exception the op may be raising */
  out->name = utf8_of(co->co_qualname);
  out->filename = utf8_of(co->co_filename);
  out->line = PyCode_Addr2Line(co, lasti * (int)sizeof(_Py_CODEUNIT));
  PyErr_Restore(et, ev, tb);
  return 0;
}

static void py_release(const uintptr_t *h, size_t n, void *user) {
  (void)user;
  if (!Py_IsInitialized()) return; /* after finalization: the references are gone anyway */
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  for (size_t i = 0; i < n; i++) Py_DECREF((PyObject *)(h[i] & CODE_MASK));
  PyErr_Restore(et, ev, tb);
  PyGILState_Release(g);
}

static const char *entry_symbols[] = {"_PyEval_EvalFrameDefault"};

bool etr_py_frames_supported(void) { return true; }

int etr_py_frames_register(const char **why) {
  if (registered) return 0;
  etr_script_unwinder u = ETR_SCRIPT_UNWINDER_INIT;
  u.entry_symbols = entry_symbols;
  u.n_entry_symbols = 1;
  u.gather = py_gather;
  u.symbolize = py_symbolize;
  u.release = py_release;
  u.release_in_record = true;
  int rc = etr_script_unwinder_register(&u);
  if (rc != 0) {
    if (why) *why = rc == ETR_EBUSY ? "another script unwinder is registered" : etr_strerror(rc);
    return rc == ETR_EBUSY ? ETR_PY_FRAMES_BUSY : ETR_PY_FRAMES_ERROR;
  }
  registered = 1;
  return 1;
}

void etr_py_frames_unregister(void) {
  if (!registered) return;
  registered = 0;
  etr_script_unwinder_unregister();
}

#else /* another CPython: no Python frames */

bool etr_py_frames_supported(void) { return false; }

int etr_py_frames_register(const char **why) {
  if (why) *why = "this build reads CPython 3.11's frames only";
  return ETR_PY_FRAMES_UNSUPPORTED;
}

void etr_py_frames_unregister(void) {}

#endif
