/* Each Python function call of a thread as an op (etr.trace(python_calls=True)): a profile
 * function of CPython's (python_calls.c). Call with the GIL held. */
#ifndef ETR_PY_PYTHON_CALLS_H
#define ETR_PY_PYTHON_CALLS_H

#include <Python.h>

/* Once, at import: the thread key that frees a thread's stack of open calls. 0, or -1. */
int etr_py_calls_init(void);
/* _etr.profile(on, pass_prefix=None) (its docstring is _etr.c's). */
PyObject *etr_py_profile(PyObject *m, PyObject *args);

#endif
