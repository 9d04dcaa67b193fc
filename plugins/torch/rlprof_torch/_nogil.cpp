// rlprof_torch._nogil: the end of a torch.profiler capture without the GIL.
//
// torch binds `_disable_profiler` and `_ProfilerResult.save` without releasing the GIL, and its
// result's destructor runs under it too. The same three C++ functions are exported by libtorch
// (`torch::autograd::profiler::disableProfiler()`, `ProfilerResult::save(const std::string&)`,
// `ProfilerResult::~ProfilerResult()`); this module finds them in the process's already loaded
// torch with dlsym and calls them between Py_BEGIN_ALLOW_THREADS and Py_END_ALLOW_THREADS.
//
// No torch header is needed, so the module builds with a C++ compiler alone (optional: without one,
// rlprof_torch falls back to torch's own calls; see rlprof_torch/nogil.py and docs/torch-nogil.md):
//
// * disableProfiler returns std::unique_ptr<ProfilerResult>. A class with a user-provided destructor
//   is returned, like unique_ptr, through a hidden pointer to caller-provided memory (Itanium C++
//   ABI, "non-trivial for the purposes of calls"); `ResultBox` below is such a class holding one
//   pointer, the unique_ptr's only member with the default deleter. Its destructor does nothing: the
//   pointer is taken over by the Python object.
// * save and the destructor are non-virtual member functions: `this` is their first argument.
// * the std::string passed to save must have torch's layout: the symbol looked up is the one mangled
//   for this compiler's std::string (libstdc++'s C++11 ABI or the old one), so a torch built with the
//   other ABI has no such symbol and the module is not used.
// * every C++ exception is caught here (a c10::Error derives from std::exception) and becomes a
//   Python RuntimeError: none crosses into the interpreter.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <exception>
#include <new>
#include <string>

namespace {

struct ResultBox {
  void* result = nullptr;
  ~ResultBox() {}  // user-provided: returned through memory the caller provides, as std::unique_ptr is
};

using DisableFn = ResultBox (*)();
using SaveFn = void (*)(void* self, const std::string& path);
using DestroyFn = void (*)(void* self);

const char kDisable[] = "_ZN5torch8autograd8profiler15disableProfilerEv";
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
const char kSave[] =
    "_ZN5torch8autograd8profiler14ProfilerResult4saveERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
const char kStringAbi[] = "libstdc++ C++11 std::string";
#elif defined(__GLIBCXX__)
const char kSave[] = "_ZN5torch8autograd8profiler14ProfilerResult4saveERKSs";
const char kStringAbi[] = "libstdc++ pre-C++11 std::string";
#else
const char kSave[] = "";  // another standard library: its std::string mangles differently; not looked for
const char kStringAbi[] = "a standard library other than libstdc++";
#endif
const char kDestroy[] = "_ZN5torch8autograd8profiler14ProfilerResultD1Ev";

DisableFn disable_fn = nullptr;
SaveFn save_fn = nullptr;
DestroyFn destroy_fn = nullptr;

// --------------------------------------------------------------------------- the result object

struct Result {
  PyObject_HEAD
  void* result;  // a torch::autograd::profiler::ProfilerResult*, owned; null once freed
  int busy;      // a save or free runs without the GIL: set and read only with the GIL held
};

// Runs `body` without the GIL; a C++ exception becomes `*error` (the message), returned false.
template <typename Body>
bool without_gil(Body body, std::string* error) {
  bool ok = true;
  Py_BEGIN_ALLOW_THREADS
  try {
    body();
  } catch (const std::exception& exc) {
    ok = false;
    try {
      *error = exc.what();
      error->resize(error->find('\n') == std::string::npos ? error->size() : error->find('\n'));  // c10::Error: no backtrace
    } catch (...) { }
  } catch (...) {
    ok = false;
    try { *error = "unknown C++ exception"; } catch (...) { }
  }
  Py_END_ALLOW_THREADS
  return ok;
}

void destroy(void* result) {
  destroy_fn(result);
  ::operator delete(result);  // made by std::make_unique with the global operator new
}

PyObject* Result_save(Result* self, PyObject* arg) {
  if (self->result == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the profiler result was freed: nothing to save");
    return nullptr;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "the profiler result is being saved or freed by another thread");
    return nullptr;
  }
  PyObject* encoded = nullptr;
  if (!PyUnicode_FSConverter(arg, &encoded)) return nullptr;  // str or os.PathLike
  std::string path;
  try {
    path.assign(PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded));
  } catch (const std::exception&) {
    Py_DECREF(encoded);
    return PyErr_NoMemory();
  }
  Py_DECREF(encoded);
  void* result = self->result;
  std::string error;
  self->busy = 1;
  bool ok = without_gil([&] { save_fn(result, path); }, &error);
  self->busy = 0;
  if (!ok) {
    PyErr_Format(PyExc_RuntimeError, "torch's ProfilerResult::save failed: %s", error.c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Result_free(Result* self, PyObject*) {
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "the profiler result is being saved by another thread");
    return nullptr;
  }
  void* result = self->result;
  self->result = nullptr;
  if (result != nullptr) {
    std::string error;
    self->busy = 1;
    bool ok = without_gil([&] { destroy(result); }, &error);
    self->busy = 0;
    if (!ok) {
      PyErr_Format(PyExc_RuntimeError, "torch's ProfilerResult destructor failed: %s", error.c_str());
      return nullptr;
    }
  }
  Py_RETURN_NONE;
}

PyObject* Result_freed(Result* self, void*) { return PyBool_FromLong(self->result == nullptr); }

void Result_dealloc(Result* self) {
  void* result = self->result;
  self->result = nullptr;
  if (result != nullptr) {
    std::string error;
    without_gil([&] { destroy(result); }, &error);  // nothing to raise to from a dealloc
  }
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

PyMethodDef Result_methods[] = {
    {"save", reinterpret_cast<PyCFunction>(Result_save), METH_O,
     "save(path): write the Chrome trace to path (torch's ProfilerResult::save), without the GIL."},
    {"free", reinterpret_cast<PyCFunction>(Result_free), METH_NOARGS,
     "free(): destroy the C++ result now, without the GIL (also done when the object goes)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef Result_getset[] = {
    {"freed", reinterpret_cast<getter>(Result_freed), nullptr, "The C++ result is gone.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject ResultType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// --------------------------------------------------------------------------- module functions

PyObject* nogil_load(PyObject*, PyObject* arg) {
  // load(path): find the three functions in the already loaded library at `path` (torch's _C module:
  // dlsym on its handle searches it and the libraries it depends on, libtorch_cpu among them).
  // Returns None, or a string saying what is missing; loads nothing new (RTLD_NOLOAD).
  PyObject* encoded = nullptr;
  if (!PyUnicode_FSConverter(arg, &encoded)) return nullptr;
  void* handle = dlopen(PyBytes_AS_STRING(encoded), RTLD_NOW | RTLD_NOLOAD);
  Py_DECREF(encoded);
  if (handle == nullptr) {
    const char* why = dlerror();
    return PyUnicode_FromFormat("torch's library is not loaded here (%s)", why ? why : "dlopen failed");
  }
  if (kSave[0] == '\0') {
    dlclose(handle);
    return PyUnicode_FromFormat("this module was built against %s, whose save symbol is not known", kStringAbi);
  }
  void* disable = dlsym(handle, kDisable);
  void* save = dlsym(handle, kSave);
  void* destroy_ = dlsym(handle, kDestroy);
  dlclose(handle);  // RTLD_NOLOAD took a reference; torch stays loaded by its own
  const char* missing = disable == nullptr ? kDisable : save == nullptr ? kSave : destroy_ == nullptr ? kDestroy : nullptr;
  if (missing != nullptr) {
    return PyUnicode_FromFormat("torch exports no %s (%s)", missing, kStringAbi);
  }
  disable_fn = reinterpret_cast<DisableFn>(disable);
  save_fn = reinterpret_cast<SaveFn>(save);
  destroy_fn = reinterpret_cast<DestroyFn>(destroy_);
  Py_RETURN_NONE;
}

PyObject* nogil_disable(PyObject*, PyObject*) {
  // disable(): torch::autograd::profiler::disableProfiler() without the GIL, on this thread (the one
  // that started the profiler). Returns a Result, or None where torch returns no result.
  if (disable_fn == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "rlprof_torch._nogil.load() has not found torch's functions");
    return nullptr;
  }
  void* result = nullptr;
  std::string error;
  bool ok = without_gil([&] {
    ResultBox box = disable_fn();
    result = box.result;
  }, &error);
  if (!ok) {
    PyErr_Format(PyExc_RuntimeError, "torch's disableProfiler failed: %s", error.c_str());
    return nullptr;
  }
  if (result == nullptr) Py_RETURN_NONE;
  Result* object = PyObject_New(Result, &ResultType);
  if (object == nullptr) {
    without_gil([&] { destroy(result); }, &error);
    return nullptr;
  }
  object->result = result;
  object->busy = 0;
  return reinterpret_cast<PyObject*>(object);
}

PyMethodDef module_methods[] = {
    {"load", nogil_load, METH_O, "load(path_of_torch_C): find torch's functions; None, or what is missing."},
    {"disable", nogil_disable, METH_NOARGS, "disable(): stop the profiler without the GIL; a Result or None."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "rlprof_torch._nogil",
    "torch.profiler's stop, save and free without the GIL (see rlprof_torch.nogil).", -1, module_methods,
};

}  // namespace

PyMODINIT_FUNC PyInit__nogil(void) {
  ResultType.tp_name = "rlprof_torch._nogil.Result";
  ResultType.tp_basicsize = sizeof(Result);
  ResultType.tp_flags = Py_TPFLAGS_DEFAULT;
  ResultType.tp_doc = "A stopped profiler's result (torch's _ProfilerResult stand-in): save(path) and free() without the GIL.";
  ResultType.tp_dealloc = reinterpret_cast<destructor>(Result_dealloc);
  ResultType.tp_methods = Result_methods;
  ResultType.tp_getset = Result_getset;
  if (PyType_Ready(&ResultType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  Py_INCREF(&ResultType);
  if (PyModule_AddObject(module, "Result", reinterpret_cast<PyObject*>(&ResultType)) < 0) {
    Py_DECREF(&ResultType);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
