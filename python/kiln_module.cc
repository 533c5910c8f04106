// The Python module `kiln._kiln` (pybind11), over Kiln's public C++ API only.
//
// Values crossing into Python: tensors become numpy arrays that share the Kiln
// tensor's memory (the array's base owns a reference to it; the array is
// writeable only when nothing else in Kiln holds that memory, e.g. not for a
// program returning one of its constants), tuples become tuples, ADT values
// `kiln.Adt` objects, closures and reference cells opaque `kiln.Value`s that can
// be passed back. Into Kiln: numpy arrays (and anything numpy.asarray takes,
// anything with __dlpack__, Python numbers) are shared without a copy when
// compact and 64-byte aligned, copied otherwise.
//
// The GIL is released while Kiln compiles or runs, so Python threads, each with
// its own VM, run programs in parallel. Every kiln::Error becomes kiln.Error.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/dlpack.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace py = pybind11;

namespace {

// ---- dtypes ----

py::dtype numpyDType(kiln::DType t) {
  switch (t) {
    case kiln::DType::Float16: return py::dtype("float16");
    case kiln::DType::Float32: return py::dtype("float32");
    case kiln::DType::Float64: return py::dtype("float64");
    case kiln::DType::Int8: return py::dtype("int8");
    case kiln::DType::Int16: return py::dtype("int16");
    case kiln::DType::Int32: return py::dtype("int32");
    case kiln::DType::Int64: return py::dtype("int64");
    case kiln::DType::UInt8: return py::dtype("uint8");
    case kiln::DType::UInt16: return py::dtype("uint16");
    case kiln::DType::Bool: return py::dtype("bool");
  }
  throw kiln::Error("dtype without a numpy counterpart");
}

kiln::DType kilnDType(const py::dtype& d) {
  char kind = d.kind();
  auto size = d.itemsize();
  if (kind == 'f' && size == 2) return kiln::DType::Float16;
  if (kind == 'f' && size == 4) return kiln::DType::Float32;
  if (kind == 'f' && size == 8) return kiln::DType::Float64;
  if (kind == 'i' && size == 1) return kiln::DType::Int8;
  if (kind == 'i' && size == 2) return kiln::DType::Int16;
  if (kind == 'i' && size == 4) return kiln::DType::Int32;
  if (kind == 'i' && size == 8) return kiln::DType::Int64;
  if (kind == 'u' && size == 1) return kiln::DType::UInt8;
  if (kind == 'u' && size == 2) return kiln::DType::UInt16;
  if (kind == 'b' && size == 1) return kiln::DType::Bool;
  throw kiln::Error("numpy dtype " + std::string(py::str(py::handle(d))) + " has no Kiln counterpart");
}

// ---- Python objects for Kiln values ----

// A Kiln value Python cannot see into (a closure or a reference cell), passed back as is.
struct OpaqueValue {
  kiln::Value value;
};

// A tensor held by Kiln, for DLPack exchange (`kiln.from_dlpack`, `__dlpack__`).
struct PyTensor {
  kiln::Tensor tensor;
};

// An ADT value: constructor name and fields (Python objects).
struct PyAdt {
  std::string name;
  py::tuple fields;
};

// ---- Kiln to Python ----

py::array toNumpy(const kiln::Tensor& t) {
  if (t.device().kind != kiln::Device::Kind::CPU)
    throw kiln::Error("tensor on " + t.device().toString() + ": copy it to the host first");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(kiln::dtypeSize(t.dtype()));
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  // The capsule owns one reference to the memory for as long as the array lives.
  auto* keep = new kiln::Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<kiln::Tensor*>(p); });
  py::array a(numpyDType(t.dtype()), shape, strides, t.data(), base);
  return a;
}

// A result's tensor may be written through numpy only when nothing else holds
// its memory: not a constant of the executable, not an input the caller still
// holds, not another field of the same result. `uniquePath`: every container on
// the way down is held by its parent alone.
// Caller memory Kiln read in place during one invoke (numpy inputs it shared).
struct SharedInputs {
  std::vector<std::pair<const char*, const char*>> ranges;
  bool contains(const void* p) const {
    for (auto [begin, end] : ranges)
      if (p >= begin && p < end) return true;
    return false;
  }
};

py::object toPython(const kiln::Executable& exe, const kiln::Value& v, bool uniquePath, const SharedInputs& inputs) {
  if (v.isScalar()) return toNumpy(v.tensor());
  if (v.isObject(kiln::ObjectKind::Tensor)) {
    const kiln::Tensor& t = v.asTensorObject()->tensor;
    bool writeable = uniquePath && v.object()->refs.load() == 1 && t.memoryUseCount() == 1 && !inputs.contains(t.data());
    py::array a = toNumpy(t);
    if (!writeable) a.attr("setflags")(py::arg("write") = false);
    return a;
  }
  if (v.isTuple() || v.isAdt()) {
    bool unique = uniquePath && v.object()->refs.load() == 1;
    auto fields = v.fields();
    py::tuple out(fields.size());
    for (size_t i = 0; i < fields.size(); ++i) out[i] = toPython(exe, fields[i], unique, inputs);
    if (v.isTuple()) return out;
    return py::cast(PyAdt{exe.constructorName(v.ctor()), out});
  }
  return py::cast(OpaqueValue{v});
}

// ---- Python to Kiln ----

// A Kiln tensor over a numpy array's memory (holding a reference to the array)
// when Kiln's kernels can read it in place; a copy otherwise.
kiln::Tensor fromNumpy(py::array a) {
  kiln::DType dtype = kilnDType(a.dtype());
  kiln::Shape shape(a.shape(), a.shape() + a.ndim());
  uint64_t bytes = static_cast<uint64_t>(a.nbytes());
  bool contiguous = (a.flags() & py::array::c_style) != 0;
  auto address = reinterpret_cast<uintptr_t>(a.data());
  if (contiguous && (bytes == 0 || (address % 64 == 0 && bytes >= 64))) {
    auto* ref = new py::object(a);
    std::shared_ptr<void> owner(const_cast<void*>(a.data()), [ref](void*) {
      // The last Kiln reference may go on any thread, with or without the GIL.
      py::gil_scoped_acquire gil;
      delete ref;
    });
    return kiln::Tensor::view(dtype, kiln::dims(shape), std::move(owner));
  }
  kiln::Tensor t = kiln::Tensor::empty(dtype, shape);
  if (bytes == 0) return t;
  if (contiguous) {
    std::memcpy(t.data(), a.data(), bytes);
  } else {
    // numpy copies the strided array into Kiln's memory, viewed as a compact array.
    py::array view(a.dtype(), std::vector<py::ssize_t>(shape.begin(), shape.end()), t.data(), py::none());
    py::module_::import("numpy").attr("copyto")(view, a);
  }
  return t;
}

PyTensor tensorFromDLPack(py::object obj);

kiln::Value fromPython(const kiln::Executable& exe, py::handle obj, const kiln::TypeDesc* type);

kiln::Value scalarValue(py::handle obj, const kiln::TypeDesc* type) {
  // The parameter's type decides the dtype; without one, Python's own (int64, float64, bool).
  kiln::DType dtype = type && type->kind == kiln::TypeDesc::Kind::Tensor ? type->dtype
                      : py::isinstance<py::bool_>(obj)                   ? kiln::DType::Bool
                      : py::isinstance<py::int_>(obj)                    ? kiln::DType::Int64
                                                                         : kiln::DType::Float64;
  if (kiln::isFloat(dtype)) return kiln::Value::floatScalar(dtype, obj.cast<double>());
  if (py::isinstance<py::float_>(obj)) throw kiln::Error("a float where " + std::string(kiln::dtypeName(dtype)) + " is expected");
  int64_t v = obj.cast<int64_t>();
  if (!kiln::intFits(dtype, v)) throw kiln::Error(std::to_string(v) + " is not a " + std::string(kiln::dtypeName(dtype)));
  return kiln::Value::intScalar(dtype, v);
}

kiln::Value fromPython(const kiln::Executable& exe, py::handle obj, const kiln::TypeDesc* type) {
  if (py::isinstance<PyTensor>(obj)) return kiln::Value(obj.cast<const PyTensor&>().tensor);
  if (py::isinstance<OpaqueValue>(obj)) return obj.cast<const OpaqueValue&>().value;
  if (py::isinstance<PyAdt>(obj)) {
    const auto& adt = obj.cast<const PyAdt&>();
    int64_t id = exe.constructorId(adt.name);
    if (id < 0) throw kiln::Error("the executable has no constructor named '" + adt.name + "'");
    uint32_t arity = exe.constructors()[static_cast<size_t>(id)].arity;
    if (arity != adt.fields.size())
      throw kiln::Error("constructor " + adt.name + " takes " + std::to_string(arity) + " field(s), not " +
                        std::to_string(adt.fields.size()));
    std::vector<kiln::Value> fields;
    for (py::handle f : adt.fields) fields.push_back(fromPython(exe, f, nullptr));
    return kiln::Value::adt(static_cast<uint32_t>(id), std::move(fields));
  }
  if (py::isinstance<py::tuple>(obj)) {
    auto t = obj.cast<py::tuple>();
    bool typed = type && type->kind == kiln::TypeDesc::Kind::Tuple && type->fields.size() == t.size();
    std::vector<kiln::Value> fields;
    for (size_t i = 0; i < t.size(); ++i) fields.push_back(fromPython(exe, t[i], typed ? &type->fields[i] : nullptr));
    return kiln::Value::tuple(std::move(fields));
  }
  if (py::isinstance<py::bool_>(obj) || py::isinstance<py::int_>(obj) || py::isinstance<py::float_>(obj))
    return scalarValue(obj, type);
  if (py::isinstance<py::array>(obj)) return kiln::Value(fromNumpy(py::reinterpret_borrow<py::array>(obj)));
  if (py::hasattr(obj, "__dlpack__")) return kiln::Value(tensorFromDLPack(py::reinterpret_borrow<py::object>(obj)).tensor);
  // Lists of numbers and other array-likes.
  return kiln::Value(fromNumpy(py::module_::import("numpy").attr("asarray")(obj)));
}

// ---- DLPack in Python ----

PyTensor tensorFromDLPack(py::object obj) {
  py::object capsule = py::hasattr(obj, "__dlpack__") ? obj.attr("__dlpack__")() : obj;
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw kiln::Error("from_dlpack needs an object with __dlpack__ or an unused 'dltensor' capsule");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  // fromDLPack takes ownership only when it returns; the capsule is renamed so
  // that its destructor leaves the tensor alone, as the protocol asks.
  kiln::Tensor t = kiln::fromDLPack(managed);
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  return PyTensor{std::move(t)};
}

py::capsule tensorToDLPack(const PyTensor& t) {
  DLManagedTensor* managed = kiln::toDLPack(t.tensor);
  // An unconsumed capsule deletes its tensor; a consumer renames it "used_dltensor".
  return py::capsule(managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    } else {
      PyErr_Clear();
    }
  });
}

// ---- Executables and VMs ----

struct PyExecutable {
  std::shared_ptr<const kiln::Executable> exe;
};

struct PyRuntime {
  std::shared_ptr<kiln::Runtime> runtime;
};

// A VM runs on one thread at a time; Python threads sharing one get an error,
// never a corrupted VM (the GIL is released while it runs).
struct BusyGuard {
  std::atomic<bool>& busy;
  explicit BusyGuard(std::atomic<bool>& b) : busy(b) {
    if (busy.exchange(true, std::memory_order_acquire))
      throw kiln::Error("this VM is running on another thread; make one VM per thread (exe.vm())");
  }
  ~BusyGuard() { busy.store(false, std::memory_order_release); }
};

struct PyVM {
  std::shared_ptr<const kiln::Executable> exe;
  std::unique_ptr<kiln::VirtualMachine> vm;
  bool onGpu = false;
  std::atomic<bool> busy{false};

  py::object invoke(const std::string& function, py::args args) {
    BusyGuard guard(busy);
    const kiln::BytecodeFunction* f = exe->findFunction(function);
    if (!f) throw kiln::Error("the executable has no function @" + function);
    std::vector<kiln::Value> in;
    in.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      in.push_back(fromPython(*exe, args[i], i < f->paramTypes.size() ? &f->paramTypes[i] : nullptr));
    SharedInputs shared;
    for (const kiln::Value& v : in)
      if (v.isObject(kiln::ObjectKind::Tensor)) {
        const kiln::Tensor& t = v.asTensorObject()->tensor;
        auto* p = static_cast<const char*>(t.data());
        shared.ranges.emplace_back(p, p + t.nbytes());
      }
    kiln::Value result;
    {
      py::gil_scoped_release unlocked;
      result = vm->invoke(function, in);
      in.clear();
      if (onGpu) result = vm->copyTo(result);
    }
    return toPython(*exe, result, true, shared);
  }
};

std::vector<kiln::Device> parseDevices(const std::optional<std::vector<std::string>>& names) {
  std::vector<kiln::Device> out;
  if (!names) return {kiln::Device{}};
  for (const auto& n : *names) out.push_back(kiln::Device::parse(n));
  if (out.empty()) throw kiln::Error("devices: an empty list");
  return out;
}

PyExecutable compileProgram(py::object source, std::optional<py::dict> params,
                            std::optional<std::vector<std::string>> devices, bool fuse, bool prelude,
                            std::optional<std::vector<std::string>> partition, std::optional<std::vector<std::string>> patterns) {
  kiln::CompileOptions options;
  options.fuse = fuse;
  options.prelude = prelude;
  options.devices = parseDevices(devices);
  if (partition) options.partition = *partition;
  // A pattern table's text, or the path of a pattern file.
  if (patterns)
    for (const std::string& p : *patterns) {
      bool text = p.find('\n') != std::string::npos || p.find('=') != std::string::npos;
      std::string body = text ? p : std::string(py::str(py::module_::import("pathlib").attr("Path")(p).attr("read_text")()));
      options.partitionPatterns.emplace_back(text ? "<patterns>" : p, std::move(body));
    }
  if (params)
    for (auto [name, value] : *params) {
      // Constants are copied into the executable: a compact copy is what it keeps.
      kiln::Tensor t = fromNumpy(py::module_::import("numpy").attr("ascontiguousarray")(value));
      kiln::Tensor own = kiln::Tensor::empty(t.dtype(), t.shape());
      if (t.nbytes()) std::memcpy(own.data(), t.data(), t.nbytes());
      options.params[py::str(name)] = std::move(own);
    }
  // A path (str or os.PathLike) to an existing file, or the program's text.
  py::object os = py::module_::import("os");
  bool isPath = py::isinstance(source, os.attr("PathLike"));
  std::string text = py::str(isPath ? os.attr("fspath")(source) : source);
  if (!isPath && text.find('\n') == std::string::npos && text.find('{') == std::string::npos &&
      os.attr("path").attr("isfile")(text).cast<bool>())
    isPath = true;
  py::gil_scoped_release unlocked;
  return PyExecutable{isPath ? kiln::compileFile(text, options) : kiln::compile(text, "<string>", options)};
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln: a runtime for dynamic machine-learning programs (the compiled core of the `kiln` package)";
  static py::exception<kiln::Error> error(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  py::class_<PyRuntime>(m, "Runtime", "Kernel cache, thread pool and memory pools that VMs share")
      .def(py::init([](int threads, std::optional<std::string> cacheDir) {
             if (threads < 0 || threads > 4096) throw kiln::Error("threads: " + std::to_string(threads));
             kiln::RuntimeOptions options;
             options.numThreads = threads;
             if (cacheDir) options.kernelCacheDir = *cacheDir;
             return PyRuntime{kiln::Runtime::create(options)};
           }),
           py::arg("threads") = 0, py::arg("cache_dir") = py::none())
      .def("stats", [](const PyRuntime& r) {
        kiln::RuntimeStats s = r.runtime->stats();
        py::dict d;
        d["kernel_compiles"] = s.kernelCompiles;
        d["kernel_cache_hits"] = s.kernelCacheHits;
        d["disk_cache_hits"] = s.diskCacheHits;
        d["precompiled_hits"] = s.precompiledHits;
        d["codegen_compiles"] = s.codegenCompiles;
        d["threads"] = s.threads;
        return d;
      });

  py::class_<PyVM>(m, "VM", "Runs an executable's functions; one thread at a time (one VM per thread)")
      .def("invoke", &PyVM::invoke, py::arg("function"),
           "invoke(function, *args): call a function with numpy arrays (or DLPack tensors, numbers, "
           "tuples, kiln.Adt values); returns numpy arrays, tuples and kiln.Adt values")
      .def("request_stop", [](PyVM& v) { v.vm->requestStop(); },
           "request_stop(): the invoke running now (on another thread) raises kiln.Error at its next call, "
           "loop step or fork; a request while nothing runs is dropped when the next invoke starts");

  py::class_<PyExecutable>(m, "Executable", "A compiled program (immutable; shared by any number of VMs)")
      .def("vm",
           [](const PyExecutable& e, std::optional<PyRuntime> runtime, std::optional<double> timeLimit) {
             auto vm = std::make_unique<PyVM>();
             vm->exe = e.exe;
             kiln::VMOptions options;
             if (runtime) options.runtime = runtime->runtime;
             // Seconds each invoke may run (VMOptions::timeLimit), checked before
             // the conversion to nanoseconds can overflow.
             if (timeLimit) {
               constexpr double kMaxSeconds = std::chrono::seconds(kiln::VMOptions::kMaxTimeLimit).count();
               if (!(*timeLimit > 0 && *timeLimit <= kMaxSeconds))
                 throw kiln::Error("time_limit: " + std::to_string(*timeLimit) + " (seconds, more than 0 and at most a year)");
               options.timeLimit = std::chrono::nanoseconds(static_cast<int64_t>(*timeLimit * 1e9));
             }
             for (const kiln::Device& d : e.exe->devices())
               if (d.isGpu()) vm->onGpu = true;
             py::gil_scoped_release unlocked;  // the first VM over an executable makes its kernels
             vm->vm = std::make_unique<kiln::VirtualMachine>(e.exe, options);
             return vm;
           },
           py::arg("runtime") = py::none(), py::arg("time_limit") = py::none())
      .def("save", [](const PyExecutable& e, const std::string& path) { e.exe->save(path); }, py::arg("path"))
      .def_property_readonly("functions", [](const PyExecutable& e) {
        std::vector<std::string> names;
        for (const auto& f : e.exe->functions()) names.push_back(f.name);
        return names;
      })
      .def("signature", [](const PyExecutable& e, const std::string& name) {
        const kiln::BytecodeFunction* f = e.exe->findFunction(name);
        if (!f) throw kiln::Error("the executable has no function @" + name);
        std::string s = "@" + name + "(";
        for (size_t i = 0; i < f->paramTypes.size(); ++i)
          s += (i ? ", %" : "%") + (i < f->paramNames.size() ? f->paramNames[i] : std::to_string(i)) + ": " +
               f->paramTypes[i].toString();
        return s + ") -> " + f->resultType.toString();
      }, py::arg("function"));

  py::class_<PyAdt>(m, "Adt", "An algebraic data type value: a constructor and its fields")
      .def(py::init([](std::string name, py::args fields) { return PyAdt{std::move(name), py::tuple(fields)}; }),
           py::arg("constructor"))
      .def_readonly("constructor", &PyAdt::name)
      .def_readonly("fields", &PyAdt::fields)
      .def("__eq__", [](const PyAdt& a, py::object other) {
        if (!py::isinstance<PyAdt>(other)) return false;
        const auto& b = other.cast<const PyAdt&>();
        if (a.name != b.name || a.fields.size() != b.fields.size()) return false;
        py::object eq = py::module_::import("numpy").attr("array_equal");
        for (size_t i = 0; i < a.fields.size(); ++i) {
          py::object x = a.fields[i], y = b.fields[i];
          bool same = py::isinstance<py::array>(x) || py::isinstance<py::array>(y) ? eq(x, y).cast<bool>() : x.equal(y);
          if (!same) return false;
        }
        return true;
      })
      .def("__repr__", [](const PyAdt& a) {
        std::string s = a.name;
        if (a.fields.size()) {
          s += "(";
          for (size_t i = 0; i < a.fields.size(); ++i) s += (i ? ", " : "") + std::string(py::repr(a.fields[i]));
          s += ")";
        }
        return s;
      });

  py::class_<OpaqueValue>(m, "Value", "A closure or reference cell returned by a program; pass it back as an argument")
      .def("__repr__", [](const OpaqueValue& v) { return "<kiln " + v.value.describe() + ">"; });

  py::class_<PyTensor>(m, "Tensor", "A tensor in Kiln's memory, for DLPack exchange")
      .def_property_readonly("shape", [](const PyTensor& t) { return std::vector<int64_t>(t.tensor.shape().begin(), t.tensor.shape().end()); })
      .def_property_readonly("dtype", [](const PyTensor& t) { return numpyDType(t.tensor.dtype()); })
      .def_property_readonly("device", [](const PyTensor& t) { return t.tensor.device().toString(); })
      .def("numpy", [](const PyTensor& t) { return toNumpy(t.tensor); }, "A numpy array sharing the tensor's memory")
      .def("__dlpack__", [](const PyTensor& t, py::object /*stream*/) { return tensorToDLPack(t); },
           py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const PyTensor& t) {
        kiln::Device d = t.tensor.device();
        return d.kind == kiln::Device::Kind::CUDA ? py::make_tuple(static_cast<int>(kDLCUDA), d.index)
                                                  : py::make_tuple(static_cast<int>(kDLCPU), 0);
      })
      .def("__repr__", [](const PyTensor& t) { return "kiln.Tensor(" + t.tensor.toString(16) + ")"; });

  m.def("compile", &compileProgram, py::arg("program"), py::arg("params") = py::none(), py::arg("devices") = py::none(),
        py::arg("fuse") = true, py::arg("prelude") = true, py::arg("partition") = py::none(), py::arg("patterns") = py::none(),
        "compile(program, params=None, devices=None, fuse=True, prelude=True, partition=None, patterns=None): Relay "
        "text, or the path of a .relay file, to an Executable; params binds main's parameters (by name) to numpy arrays "
        "as weights; partition names libraries to hand what they support to (['dnnl']), patterns gives pattern tables "
        "(their text, or pattern files' paths)");
  m.def("load", [](const std::string& path) {
    py::gil_scoped_release unlocked;
    return PyExecutable{kiln::Executable::load(path)};
  }, py::arg("path"), "load(path): an executable written by kilnc -o or Executable.save");
  m.def("from_dlpack", &tensorFromDLPack, py::arg("tensor"),
        "from_dlpack(obj): a kiln.Tensor sharing the memory of an object with __dlpack__ (or a DLPack capsule)");
}
