// torch_gemm_act._C: importing it registers the operators (the
// TORCH_LIBRARY blocks of this library). Its few functions tell the Python
// side what the C++ tables hold (the activations, the CUDA backends, the
// compiled kernel configurations) and set the testing switch (testing.h).
#include <Python.h>

#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "activations.h"
#include "checks.h"
#include "testing.h"
#ifdef GEMM_ACT_WITH_CUDA
#include "cuda/cuda_backends.h"
#endif

namespace gemm_act {
namespace {

// Runs `body` (returning a new reference), turning C++ errors into Python ones.
template <class F>
PyObject* guarded(F&& body) {
  try {
    return body();
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// ((name, grad_from_y, uses_slope), ...) in the table's order.
PyObject* activations(PyObject*, PyObject*) {
  PyObject* out = PyTuple_New(kNumActivations);
  for (int i = 0; i < kNumActivations; ++i) {
    const auto act = static_cast<Activation>(i);
    PyTuple_SET_ITEM(out, i, Py_BuildValue("(sOO)", activation_name(act),
                                           grad_from_output(act) ? Py_True : Py_False,
                                           uses_slope(act) ? Py_True : Py_False));
  }
  return out;
}

// None, or ValueError as the operators raise it.
PyObject* check_activation(PyObject*, PyObject* args) {
  const char* name = nullptr;
  double slope = 0.0;
  if (!PyArg_ParseTuple(args, "sd", &name, &slope)) return nullptr;
  return guarded([&] {
    check_negative_slope(parse_activation(name), slope);
    Py_RETURN_NONE;
  });
}

PyObject* string_tuple(const std::vector<std::string>& items) {
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    PyTuple_SET_ITEM(out, i, PyUnicode_FromString(items[i].c_str()));
  }
  return out;
}

// The CUDA forward backends in the order the dispatch rule tries them.
PyObject* cuda_backends(PyObject*, PyObject*) {
#ifdef GEMM_ACT_WITH_CUDA
  return string_tuple(cuda_forward_backends());
#else
  return PyTuple_New(0);
#endif
}

// ((family, name, dtype, b_layout, stores_z), ...): every compiled kernel
// configuration of the tensor-core families.
PyObject* kernels(PyObject*, PyObject*) {
#ifdef GEMM_ACT_WITH_CUDA
  const std::vector<KernelInfo> infos = compiled_kernels();
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(infos.size()));
  for (size_t i = 0; i < infos.size(); ++i) {
    const KernelInfo& k = infos[i];
    PyTuple_SET_ITEM(out, i, Py_BuildValue("(ssssO)", k.family.c_str(), k.name.c_str(),
                                           k.dtype.c_str(), k.b_layout.c_str(),
                                           k.stores_z ? Py_True : Py_False));
  }
  return out;
#else
  return PyTuple_New(0);
#endif
}

PyObject* set_testing_overrides(PyObject*, PyObject* args) {
  const char* backend = nullptr;
  const char* kernel = nullptr;
  int poison = 0;
  if (!PyArg_ParseTuple(args, "ssp", &backend, &kernel, &poison)) return nullptr;
  testing::set_overrides({backend, kernel, poison != 0});
  Py_RETURN_NONE;
}

// (cuda_backend, sm90_kernel, poison_outputs)
PyObject* testing_overrides(PyObject*, PyObject*) {
  const testing::Overrides o = testing::overrides();
  return Py_BuildValue("(ssO)", o.cuda_backend.c_str(), o.sm90_kernel.c_str(),
                       o.poison_outputs ? Py_True : Py_False);
}

PyMethodDef kMethods[] = {
    {"activations", activations, METH_NOARGS, "((name, grad_from_y, uses_slope), ...)"},
    {"check_activation", check_activation, METH_VARARGS,
     "check_activation(name, negative_slope): ValueError as the operators raise it"},
    {"cuda_backends", cuda_backends, METH_NOARGS, "the CUDA forward backends, in dispatch order"},
    {"kernels", kernels, METH_NOARGS,
     "((family, name, dtype, b_layout, stores_z), ...) compiled in this build"},
    {"set_testing_overrides", set_testing_overrides, METH_VARARGS,
     "set_testing_overrides(cuda_backend, sm90_kernel, poison_outputs); see torch_gemm_act.testing"},
    {"testing_overrides", testing_overrides, METH_NOARGS,
     "(cuda_backend, sm90_kernel, poison_outputs)"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace
}  // namespace gemm_act

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1,
                                          gemm_act::kMethods};
  return PyModule_Create(&module_def);
}
