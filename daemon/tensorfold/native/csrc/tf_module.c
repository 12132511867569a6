/* The kernels ship as a Python extension module so the standard build makes
 * them; Python loads the same file with ctypes (see native/lib.py). */
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tfkernels", "TensorFold CPU kernels (use tensorfold.native)", -1, 0};

PyMODINIT_FUNC PyInit__tfkernels(void) { return PyModule_Create(&module); }
