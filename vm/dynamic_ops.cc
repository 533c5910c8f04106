// Native implementations of the data-dependent operators.
#include "vm/dynamic_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/error.h"
#include "ops/registry.h"
#include "vm/memory.h"

namespace kiln::vm {

namespace {

// Outputs come from the VM's pool of the device the kernel was placed on (a CPU
// device: these operators run natively).
struct Outputs {
  TensorMemory& memory;
  Device device;
};
Tensor hostTensor(const Outputs& mem, DType dtype, std::span<const int64_t> shape) { return mem.memory.tensor(dtype, shape, mem.device); }
Tensor hostTensor(const Outputs& mem, DType dtype, std::initializer_list<int64_t> shape) {
  return hostTensor(mem, dtype, std::span<const int64_t>(shape.begin(), shape.size()));
}
Tensor hostTensor(const Outputs& mem, DType dtype, const Shape& shape) { return hostTensor(mem, dtype, dims(shape)); }

int64_t scalarInt(const Tensor& t, const char* what) {
  if (t.rank() != 0) throw Error(std::string(what) + " must be a scalar");
  int64_t i = 0;
  double f = 0;
  readScalar(t.data(), t.dtype(), i, f);
  return isFloat(t.dtype()) ? static_cast<int64_t>(f) : i;
}

double scalarFloat(const Tensor& t) {
  int64_t i = 0;
  double f = 0;
  readScalar(t.data(), t.dtype(), i, f);
  return isFloat(t.dtype()) ? f : static_cast<double>(i);
}

std::vector<int64_t> intVector(const Tensor& t, const char* what) {
  if (t.rank() != 1 || isFloat(t.dtype())) throw Error(std::string(what) + " must be a 1-D integer tensor");
  std::vector<int64_t> v(static_cast<size_t>(t.shape()[0]));
  const char* p = static_cast<const char*>(t.data());
  for (size_t k = 0; k < v.size(); ++k) {
    double f;
    readScalar(p + k * dtypeSize(t.dtype()), t.dtype(), v[k], f);
  }
  return v;
}

ops::AttrValue intList(const std::vector<int64_t>& v) {
  std::vector<ops::AttrValue> l;
  for (int64_t x : v) l.push_back(ops::AttrValue::ofInt(x));
  return ops::AttrValue::ofList(std::move(l));
}

// Output shape of a static operator with the given attributes (runs its shape rule).
Shape staticShape(const char* op, const Tensor& x, ops::AttrMap attrs) {
  ops::TensorDesc d{x.dtype(), ops::Shape(x.shape().begin(), x.shape().end())};
  try {
    auto out = ops::findOp(op)->infer(std::span<const ops::TensorDesc>(&d, 1), attrs);
    return Shape(out[0].shape.begin(), out[0].shape.end());
  } catch (const ops::OpError& e) {
    throw Error(e.what());
  }
}

// out[i...] = src[offset + sum(i_d * strides_d)], elementwise by byte size.
void stridedCopy(const Tensor& src, int64_t offset, const std::vector<int64_t>& strides, const Tensor& out) {
  size_t es = dtypeSize(src.dtype());
  const char* in = static_cast<const char*>(src.data());
  char* o = static_cast<char*>(out.data());
  int64_t n = out.numel();
  size_t rank = out.rank();
  std::vector<int64_t> idx(rank, 0);
  int64_t at = offset;
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(o + static_cast<size_t>(k) * es, in + at * static_cast<int64_t>(es), es);
    for (size_t d = rank; d-- > 0;) {
      at += strides[d];
      if (++idx[d] < out.shape()[d]) break;
      at -= strides[d] * idx[d];
      idx[d] = 0;
    }
  }
}

std::vector<int64_t> rowMajorStrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

Tensor arange(const kernel_ir::FusedNode& n, std::span<const Tensor> in, const Outputs& mem) {
  double start = scalarFloat(in[0]), stop = scalarFloat(in[1]), step = scalarFloat(in[2]);
  if (step == 0) throw Error("arange: step must not be 0");
  double count = std::ceil((stop - start) / step);
  if (!(count < 1e12)) throw Error("arange: too many elements");
  int64_t len = count > 0 ? static_cast<int64_t>(count) : 0;
  DType dt = n.type.dtype;
  Tensor out = hostTensor(mem, dt, {len});
  char* p = static_cast<char*>(out.data());
  bool integral = !isFloat(in[0].dtype());
  int64_t istart = integral ? scalarInt(in[0], "start") : 0, istep = integral ? scalarInt(in[2], "step") : 0;
  for (int64_t i = 0; i < len; ++i) {
    double v = start + static_cast<double>(i) * step;
    writeScalar(p + static_cast<size_t>(i) * dtypeSize(dt), dt, integral ? istart + i * istep : static_cast<int64_t>(v), v);
  }
  return out;
}

Tensor argwhere(const Tensor& x, const Outputs& mem) {
  size_t es = dtypeSize(x.dtype());
  const char* p = static_cast<const char*>(x.data());
  std::vector<int64_t> hits;
  for (int64_t k = 0; k < x.numel(); ++k) {
    bool nz = false;
    for (size_t b = 0; b < es; ++b) nz |= p[static_cast<size_t>(k) * es + b] != 0;
    if (isFloat(x.dtype())) {  // -0.0 is zero
      int64_t i;
      double f;
      readScalar(p + static_cast<size_t>(k) * es, x.dtype(), i, f);
      nz = f != 0;
    }
    if (nz) hits.push_back(k);
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  Tensor out = hostTensor(mem, DType::Int32, {static_cast<int64_t>(hits.size()), rank});
  int32_t* o = out.data<int32_t>();
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rest = hits[h];
    for (int64_t d = rank; d-- > 0;) {
      o[static_cast<int64_t>(h) * rank + d] = static_cast<int32_t>(rest % x.shape()[static_cast<size_t>(d)]);
      rest /= x.shape()[static_cast<size_t>(d)];
    }
  }
  return out;
}

Tensor stridedSlice(const kernel_ir::FusedNode& n, std::span<const Tensor> in, const Outputs& mem) {
  const Tensor& x = in[0];
  std::vector<int64_t> begin = intVector(in[1], "begin"), end = intVector(in[2], "end"), strides = intVector(in[3], "strides");
  ops::AttrMap attrs = n.attrs;
  attrs.set("begin", intList(begin));
  attrs.set("end", intList(end));
  attrs.set("strides", intList(strides));
  bool sizeMode = false;
  if (auto* m = n.attrs.find("slice_mode")) sizeMode = m->kind == ops::AttrValue::Kind::String && m->s == "size";
  Shape outShape = staticShape("strided_slice", x, attrs);
  std::vector<int64_t> xs = rowMajorStrides(x.shape()), st(x.rank());
  int64_t offset = 0;
  for (size_t d = 0; d < x.rank(); ++d) {
    int64_t stride = d < begin.size() ? (strides.empty() ? 1 : d < strides.size() ? strides[d] : strides.back()) : 1;
    if (sizeMode) stride = 1;
    int64_t dim = x.shape()[d], b = d < begin.size() ? begin[d] : 0;
    if (b < 0) b += dim;
    b = stride > 0 ? std::clamp<int64_t>(b, 0, dim) : std::clamp<int64_t>(b, -1, dim - 1);
    if (outShape[d] > 0) offset += b * xs[d];
    st[d] = stride * xs[d];
  }
  Tensor out = hostTensor(mem, x.dtype(), outShape);
  stridedCopy(x, offset, st, out);
  return out;
}

Tensor broadcastTo(const Tensor& x, const std::vector<int64_t>& shape, const Outputs& mem) {
  ops::AttrMap attrs;
  attrs.set("shape", intList(shape));
  Shape outShape = staticShape("broadcast_to", x, attrs);
  std::vector<int64_t> xs = rowMajorStrides(x.shape()), st(outShape.size(), 0);
  size_t lead = outShape.size() - x.rank();
  for (size_t d = 0; d < x.rank(); ++d) st[lead + d] = x.shape()[d] == 1 ? 0 : xs[d];
  Tensor out = hostTensor(mem, x.dtype(), outShape);
  stridedCopy(x, 0, st, out);
  return out;
}

}  // namespace

Tensor runDynamicKernel(const kernel_ir::FusedFunction& f, std::span<const Tensor> params, TensorMemory& memory, Device device) {
  if (device.kind != Device::Kind::CPU) throw Error(f.name + " runs natively on a CPU device, not on " + device.toString());
  Outputs mem{memory, device};
  const kernel_ir::FusedNode& n = f.node(f.outputs[0]);
  std::vector<Tensor> in;
  for (int32_t id : n.inputs) {
    if (f.isParam(id)) {
      in.push_back(params[static_cast<size_t>(id)]);
    } else {
      const kernel_ir::FusedNode& c = f.node(id);
      Tensor t = hostTensor(Outputs{memory, Device{}}, c.type.dtype, std::span<const int64_t>{});
      writeScalar(t.data(), c.type.dtype, c.intValue, c.floatValue);
      in.push_back(t);
    }
  }
  for (const Tensor& t : in)
    if (t.device().kind != Device::Kind::CPU) throw Error(n.op->name + " runs on the host; its operands must be on the CPU");
  const std::string& op = n.op->name;
  if (op == "arange") return arange(n, in, mem);
  if (op == "argwhere") return argwhere(in[0], mem);
  if (op == "dyn.zeros") {
    std::vector<int64_t> shape = intVector(in[0], "shape");
    for (int64_t d : shape)
      if (d < 0) throw Error("dyn.zeros: negative dimension in shape");
    Tensor out = hostTensor(mem, n.type.dtype, std::span<const int64_t>(shape));
    std::memset(out.data(), 0, out.nbytes());
    return out;
  }
  if (op == "dyn.reshape") {
    ops::AttrMap attrs = n.attrs;
    attrs.set("newshape", intList(intVector(in[1], "newshape")));
    Shape s = staticShape("reshape", in[0], attrs);
    return in[0].reshaped(dims(s));
  }
  if (op == "dyn.broadcast_to") return broadcastTo(in[0], intVector(in[1], "shape"), mem);
  if (op == "dyn.strided_slice") return stridedSlice(n, in, mem);
  throw Error("no run-time implementation of " + op);
}

}  // namespace kiln::vm
