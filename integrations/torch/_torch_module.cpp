// etr._torch: the Python face of integrations/torch (attach, detach, attached).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "etr/torch.h"
#include "python_errors.h"
#include "python_groups.h"

static PyObject *attach(PyObject *, PyObject *) {
  if (etr_torch_attach() != 0) {
    PyErr_SetString(PyExc_RuntimeError, "PyTorch refused etr's RecordFunction callback");
    return nullptr;
  }
  Py_RETURN_NONE;
}

static PyObject *detach(PyObject *, PyObject *) {
  // (without the GIL: letting the held tensors go may free one whose destructor takes the
  // GIL, on this thread or on one whose set detach waits for)
  PyThreadState *ts = PyEval_SaveThread();
  etr_torch_detach();
  PyEval_RestoreThread(ts);
  Py_RETURN_NONE;
}

// A Python error that Python code run by a read of a tensor (a subclass's sizes or strides)
// left set when it raised: etr wrote the tensor without a shape, and the op goes on, so the
// error is not the op's (python_errors.h). A KeyboardInterrupt is a Ctrl-C that came while
// that code ran: Python gets it back as the interrupt it was (raised in the main thread at
// its next check, or given to the program's own SIGINT handler), not lost with the read.
static void drop_python_error(void) {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE g = PyGILState_Ensure();
  bool interrupt = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
  PyErr_Clear();
  if (interrupt) PyErr_SetInterrupt();
  PyGILState_Release(g);
}

static PyObject *attached(PyObject *, PyObject *) { return PyBool_FromLong(etr_torch_attached()); }

// name_group(address, name, size, group_rank): python_groups.h (etr.torch's _declare_dist).
static PyObject *name_group(PyObject *, PyObject *args) {
  unsigned long long pg;
  const char *name;
  long long size, group_rank;
  if (!PyArg_ParseTuple(args, "KsLL", &pg, &name, &size, &group_rank)) return nullptr;
  if (etr_torch__name_group(static_cast<uintptr_t>(pg), name, size, group_rank) != 0) {
    PyErr_SetString(PyExc_ValueError, "a group name etr cannot keep");
    return nullptr;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"attach", attach, METH_NOARGS, "Record PyTorch's ops into the open etr trace."},
    {"detach", detach, METH_NOARGS, "Stop recording PyTorch's ops."},
    {"attached", attached, METH_NOARGS, "True while attached."},
    {"name_group", name_group, METH_VARARGS,
     "Name the process group at a C++ address for its collectives (etr.torch)."},
    {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "_torch",
                                    "etr's PyTorch integration (see etr.torch).",
                                    -1,
                                    methods,
                                    nullptr,
                                    nullptr,
                                    nullptr,
                                    nullptr};

PyMODINIT_FUNC PyInit__torch(void) {
  etr_torch__set_error_drop(drop_python_error);
  return PyModule_Create(&module);
}
