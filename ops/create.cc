// Tensor creation (zeros, ones, full, *_like, arange), dynamic-shape operators
// (shape_of, dyn.*, argwhere) and the device annotations (on_device, device_copy).
#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

namespace kiln::ops {
namespace {

Shape shapeAttr(const OpCall& call) {
  std::vector<int64_t> s = call.attrs.requireIntList("shape");
  for (int64_t d : s)
    if (d < 0) call.attrs.fail("shape", "must not contain negative sizes");
  return Shape(s.begin(), s.end());
}

std::vector<TensorDesc> constantFillRule(const OpCall& call) {
  return {TensorDesc{call.attrs.getDType("dtype").value_or(DType::Float32), shapeAttr(call)}};
}

void requireScalar(const OpCall& call, const TensorDesc& t, std::string_view operand) {
  if (t.rank() != 0) opFail(call, std::string(operand) + " must be a scalar, but has type " + descToString(t));
}

std::vector<TensorDesc> fullRule(const OpCall& call) {
  requireScalar(call, call.inputs[0], "fill_value");
  return {TensorDesc{call.attrs.getDType("dtype").value_or(call.inputs[0].dtype), shapeAttr(call)}};
}

std::vector<TensorDesc> likeRule(const OpCall& call) { return {call.inputs[0]}; }

std::vector<TensorDesc> fullLikeRule(const OpCall& call) {
  requireScalar(call, call.inputs[1], "fill_value");
  return {call.inputs[0]};
}

std::vector<TensorDesc> arangeRule(const OpCall& call) {
  for (int k = 0; k < 3; ++k) {
    requireScalar(call, call.inputs[k], k == 0 ? "start" : k == 1 ? "stop" : "step");
    requireDType(call, call.inputs[k], DTypeClass::Numeric, k == 0 ? "start" : k == 1 ? "stop" : "step");
  }
  return {TensorDesc{call.attrs.getDType("dtype").value_or(call.inputs[0].dtype), {kAnyDim}}};
}

std::vector<TensorDesc> shapeOfRule(const OpCall& call) {
  DType dt = call.attrs.getDType("dtype").value_or(DType::Int32);
  if (!isInt(dt)) call.attrs.fail("dtype", "must be an integer type");
  return {TensorDesc{dt, {static_cast<int64_t>(call.inputs[0].rank())}}};
}

// A 1-D integer operand that holds a shape; its static length is the result's rank.
size_t shapeOperandRank(const OpCall& call, const TensorDesc& t, std::string_view operand) {
  requireDType(call, t, DTypeClass::Int, operand);
  requireRank(call, t, 1, operand);
  if (t.shape[0] == kAnyDim) opFail(call, std::string(operand) + " must have a static length (the result's rank)");
  if (t.shape[0] > 32) opFail(call, std::string(operand) + " has " + std::to_string(t.shape[0]) + " entries; ranks above 32 are not supported");
  return static_cast<size_t>(t.shape[0]);
}

std::vector<TensorDesc> dynReshapeRule(const OpCall& call) {
  size_t rank = shapeOperandRank(call, call.inputs[1], "newshape");
  call.attrs.getBool("allowzero", false);
  return {TensorDesc{call.inputs[0].dtype, Shape(rank, kAnyDim)}};
}

std::vector<TensorDesc> dynBroadcastToRule(const OpCall& call) {
  size_t rank = shapeOperandRank(call, call.inputs[1], "shape");
  if (rank < call.inputs[0].rank())
    opFail(call, "target rank " + std::to_string(rank) + " is below the operand's rank " +
                     std::to_string(call.inputs[0].rank()));
  return {TensorDesc{call.inputs[0].dtype, Shape(rank, kAnyDim)}};
}

std::vector<TensorDesc> dynZerosRule(const OpCall& call) {
  size_t rank = shapeOperandRank(call, call.inputs[0], "shape");
  return {TensorDesc{call.attrs.getDType("dtype").value_or(DType::Float32), Shape(rank, kAnyDim)}};
}

std::vector<TensorDesc> dynStridedSliceRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  for (int k = 1; k < 4; ++k) {
    const char* name = k == 1 ? "begin" : k == 2 ? "end" : "strides";
    size_t n = shapeOperandRank(call, call.inputs[k], name);
    if (n > x.rank()) opFail(call, std::string(name) + " has more entries than the operand has dimensions");
  }
  call.attrs.getChoice("slice_mode", {"end", "size"});
  return {TensorDesc{x.dtype, Shape(x.rank(), kAnyDim)}};
}

std::vector<TensorDesc> argwhereRule(const OpCall& call) {
  return {TensorDesc{DType::Int32, {kAnyDim, static_cast<int64_t>(call.inputs[0].rank())}}};
}

// Device annotations pass their operand's type through; the type checker handles
// them directly (their operand may be any type). The rule only validates attributes.
void requireDeviceName(const OpCall& call, std::string_view attr, bool required) {
  if (!call.attrs.has(attr)) {
    std::string_view tvm = attr == "device" ? "device_type" : attr == "src_device" ? "src_dev_type" : "dst_dev_type";
    if (call.attrs.has(tvm)) {
      (void)annotatedDevice(call.attrs, attr);  // validates TVM 0.8's integer form
      return;
    }
    if (required) call.attrs.fail(attr, "is required");
    return;
  }
  std::string d = call.attrs.getString(attr, "");
  std::string kind = d.substr(0, d.find(':'));
  bool ok = kind == "cpu" || kind == "cuda" || kind == "cuda-emu";
  if (ok && d.size() > kind.size()) {
    std::string idx = d.substr(kind.size() + 1);
    ok = !idx.empty() && idx.size() < 4 && idx.find_first_not_of("0123456789") == std::string::npos;
  }
  if (!ok) call.attrs.fail(attr, "= \"" + d + "\" is not a device (expected cpu, cuda, cuda-emu, cpu:N, cuda:N or cuda-emu:N)");
}

std::vector<TensorDesc> onDeviceRule(const OpCall& call) {
  requireDeviceName(call, "device", true);
  call.attrs.getBool("constrain_body", true);
  call.attrs.getBool("constrain_result", false);
  return {};
}

std::vector<TensorDesc> deviceCopyRule(const OpCall& call) {
  requireDeviceName(call, "src_device", true);
  requireDeviceName(call, "dst_device", true);
  return {};
}


// ---- compute rules ----
template <int Value>
int32_t constantCompute(const ComputeCall& c) { return c.b.constant(Value, c.output.dtype); }

int32_t fullCompute(const ComputeCall& c) { return c.b.cast(c.output.dtype, c.load(0, {})); }
int32_t fullLikeCompute(const ComputeCall& c) { return c.b.cast(c.output.dtype, c.load(1, {})); }

int32_t shapeOfCompute(const ComputeCall& c) {
  size_t rank = c.inputs[0].rank();
  if (rank == 0) return c.b.constant(0, c.output.dtype);
  loop::ExprId v = c.inputDim(0, rank - 1);
  for (size_t d = rank - 1; d-- > 0;)
    v = c.b.select(c.b.binary(loop::BinaryOp::Eq, c.index[0], c.b.intConst(static_cast<int64_t>(d))), c.inputDim(0, d), v);
  return c.b.cast(c.output.dtype, v);
}

}  // namespace

void registerCreateOps(OpTable& t) {
  t.add("zeros", 0, OpPattern::ElemWise, constantFillRule, {"shape", "dtype"}).compute = constantCompute<0>;
  t.add("ones", 0, OpPattern::ElemWise, constantFillRule, {"shape", "dtype"}).compute = constantCompute<1>;
  t.add("full", 1, OpPattern::ElemWise, fullRule, {"shape", "dtype"}).compute = fullCompute;
  t.add("zeros_like", 1, OpPattern::ElemWise, likeRule).compute = constantCompute<0>;
  t.add("ones_like", 1, OpPattern::ElemWise, likeRule).compute = constantCompute<1>;
  t.add("full_like", 2, OpPattern::ElemWise, fullLikeRule).compute = fullLikeCompute;
  t.add("arange", 3, OpPattern::Opaque, arangeRule, {"dtype"}).dataDependent = true;
  t.add("shape_of", 1, OpPattern::Opaque, shapeOfRule, {"dtype"}).compute = shapeOfCompute;
  t.add("dyn.reshape", 2, OpPattern::Opaque, dynReshapeRule, {"allowzero"}).dataDependent = true;
  t.add("dyn.broadcast_to", 2, OpPattern::Opaque, dynBroadcastToRule).dataDependent = true;
  t.add("dyn.zeros", 1, OpPattern::Opaque, dynZerosRule, {"dtype"}).dataDependent = true;
  t.add("dyn.strided_slice", 4, OpPattern::Opaque, dynStridedSliceRule, {"slice_mode"}).dataDependent = true;
  t.add("argwhere", 1, OpPattern::Opaque, argwhereRule).dataDependent = true;
  t.add("on_device", 1, OpPattern::Opaque, onDeviceRule,
        {"device", "constrain_body", "constrain_result", "device_type", "device_id", "is_fixed"})
      .annotation = true;
  t.add("device_copy", 1, OpPattern::Opaque, deviceCopyRule, {"src_device", "dst_device", "src_dev_type", "dst_dev_type"})
      .annotation = true;
}

Device annotatedDevice(const AttrReader& attrs, std::string_view attr) {
  if (attrs.has(attr)) return Device::parse(attrs.getString(attr, "cpu"));
  std::string_view tvm = attr == "device" ? "device_type" : attr == "src_device" ? "src_dev_type" : "dst_dev_type";
  if (!attrs.has(tvm)) return Device{};
  // DLPack's device types, as TVM 0.8 writes them: 1 the CPU, 2 a CUDA GPU.
  int64_t type = attrs.getInt(tvm, 1);
  if (type != 1 && type != 2) attrs.fail(tvm, "= " + std::to_string(type) + " is not a device type Kiln knows (1: cpu, 2: cuda)");
  int64_t id = attr == "device" ? attrs.getInt("device_id", 0) : 0;
  if (id < 0 || id > 999) attrs.fail("device_id", "must be between 0 and 999");
  return Device{type == 1 ? Device::Kind::CPU : Device::Kind::CUDA, static_cast<uint16_t>(id)};
}

}  // namespace kiln::ops
