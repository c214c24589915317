/* whilst._uninitialized_cpu: an XLA:CPU FFI handler that leaves its results as
 * XLA allocated them, unwritten.
 *
 * whilst.ir._buffers lowers `uninitialized` (residual stacks and checkpoint
 * slots, whose rows are written before they are read) to one custom call of this
 * handler under jax.jit on CPU, so a stack of maximum_iterations rows costs no
 * fill. Equivalent Python: `def handler(*results): pass`.
 *
 * xla/ffi/api/c_api.h is XLA's C FFI header, copied from jaxlib 0.12.0.1
 * (include/xla/ffi/api); the handler uses only the leading fields of its
 * structs, which XLA keeps ABI-stable across FFI versions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "xla/ffi/api/c_api.h"

/* XLA first calls a handler with a metadata extension to learn its FFI version:
 * answer with the version of the XLA calling it, as the handler reads nothing. */
static XLA_FFI_Error* leave_unwritten(XLA_FFI_CallFrame* frame) {
  for (XLA_FFI_InternalExtension* ext = frame->extension_start; ext; ext = ext->next) {
    if (ext->type == XLA_FFI_Extension_Metadata) {
      XLA_FFI_Metadata* metadata = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
      if (frame->api) {
        metadata->api_version.major_version = frame->api->api_version.major_version;
        metadata->api_version.minor_version = frame->api->api_version.minor_version;
      } else {
        metadata->api_version.major_version = XLA_FFI_API_MAJOR;
        metadata->api_version.minor_version = XLA_FFI_API_MINOR;
      }
      metadata->traits = 0;
      return NULL;
    }
  }
  return NULL;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_uninitialized_cpu",
    "`handler`: a PyCapsule of an XLA:CPU FFI handler that leaves its results unwritten.",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__uninitialized_cpu(void) {
  PyObject* module = PyModule_Create(&module_def);
  if (module == NULL) return NULL;
  PyObject* handler = PyCapsule_New((void*)leave_unwritten, NULL, NULL);
  if (handler == NULL || PyModule_AddObject(module, "handler", handler) < 0) {
    Py_XDECREF(handler);
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
