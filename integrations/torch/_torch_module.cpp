// etr._torch: the Python face of integrations/torch (attach, detach, attached).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "etr/torch.h"
#include "python_errors.h"

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

static PyMethodDef methods[] = {
    {"attach", attach, METH_NOARGS, "Record PyTorch's ops into the open etr trace."},
    {"detach", detach, METH_NOARGS, "Stop recording PyTorch's ops."},
    {"attached", attached, METH_NOARGS, "True while attached."},
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
