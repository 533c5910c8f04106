// FLOPs and bytes of a fused kernel, and its floor on this machine (work_bound.h).
#include "tune/work_bound.h"

#include <algorithm>

#include "device/cpu_limits.h"
#include "kernel_ir/loop_ir.h"
#include "kernel_ir/shape_util.h"

namespace kiln::tune {

namespace {

double elementsOf(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(std::max<int64_t>(d, 0));
  return n;
}

// Multiply-adds of a product node per output element: the contraction depth.
double depthOf(const kernel_ir::FusedNode& n, const std::vector<Shape>& shapes) {
  const std::string& op = n.op->name;
  ops::AttrReader attrs(op, n.attrs);
  auto dim = [&](size_t input, int64_t fromEnd) -> double {
    const Shape& s = shapes[static_cast<size_t>(n.inputs[input])];
    if (static_cast<int64_t>(s.size()) < fromEnd) return 0;
    return static_cast<double>(s[s.size() - static_cast<size_t>(fromEnd)]);
  };
  if (op == "nn.dense") return dim(0, 1);
  if (op == "nn.matmul" || op == "nn.batch_matmul")
    return attrs.getBool("transpose_a", false) ? dim(0, 2) : dim(0, 1);
  if (op == "nn.conv2d") {
    // Weights per output channel: all of w over its output channels.
    const Shape& w = shapes[static_cast<size_t>(n.inputs[1])];
    std::string layout = attrs.getString("kernel_layout", "OIHW");
    size_t o = layout.find('O');
    if (w.empty() || o == std::string::npos || o >= w.size() || w[o] <= 0) return 0;
    double depth = elementsOf(w) / static_cast<double>(w[o]);
    // A 3x3 filter that minimal filtering may take (Schedule::convWinograd)
    // costs its products, not the direct form's nine a channel and output: its
    // fewest, 36 per 4x4 output tile at stride 1 (winograd=4) and 25 per 2x2
    // tile at stride 2 (jit/conv2d_winograd.cc). Counted low (their transforms
    // add none) wherever the runtime might take that path (its conditions that
    // shapes alone decide: 16 or more channels, 8 or more filters), so that the
    // floor bounds every algorithm.
    size_t h = layout.find('H'), wd = layout.find('W'), i = layout.find('I');
    if (w.size() == 4 && h < w.size() && wd < w.size() && i < w.size() && w[h] == 3 && w[wd] == 3 &&
        loop::winogradChannelsPay(w[i], w[o])) {
      ops::Window2d win = ops::windowAttrs(attrs);
      int64_t stride = loop::winogradStride(win.strides[0], win.strides[1], win.dilation[0], win.dilation[1],
                                            attrs.getInt("groups", 1));
      if (int64_t form = loop::winogradForm(stride, 4)) {
        double tile = static_cast<double>(loop::winogradFormTile(form));
        depth *= static_cast<double>(loop::winogradTileProducts(form)) / (9.0 * tile * tile);
      }
    }
    return depth;
  }
  return 1;
}

}  // namespace

WorkBound workBound(const kernel_ir::FusedFunction& f, const std::vector<Shape>& shapes) {
  std::vector<Shape> all = kernel_ir::computeShapes(f, shapes);
  WorkBound b;
  for (size_t p = 0; p < f.params.size(); ++p) b.bytes += elementsOf(all[p]) * static_cast<double>(dtypeSize(f.params[p].dtype));
  for (int32_t o : f.outputs)
    b.outputBytes += elementsOf(all[static_cast<size_t>(o)]) * static_cast<double>(dtypeSize(f.typeOf(o).dtype));
  b.bytes += b.outputBytes;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const kernel_ir::FusedNode& n = f.nodes[i];
    if (n.isConstant()) continue;
    double out = elementsOf(all[f.params.size() + i]);
    switch (n.op->pattern) {
      case ops::OpPattern::ElemWise:
      case ops::OpPattern::Broadcast:
        b.flops += out;
        break;
      case ops::OpPattern::CommReduce:
        if (!n.inputs.empty()) b.flops += elementsOf(all[static_cast<size_t>(n.inputs[0])]);
        break;
      case ops::OpPattern::OutEWiseFusable:
        b.flops += 2 * out * depthOf(n, all);
        break;
      case ops::OpPattern::Injective:  // data movement: nothing computed
      case ops::OpPattern::Opaque:     // unknown: counted as nothing (the floor stays a lower bound)
        break;
    }
  }
  return b;
}

MachineFloor MachineFloor::measure(int threads) {
  MachineFloor m;
  m.threads = std::max(threads, 1);
  m.peakFlopsPerCore = device::fp32PeakPerCore(3, 5'000'000);
  return m;
}

MachineFloor::Floor MachineFloor::floorOf(const WorkBound& b) const {
  double operands = std::max(0.0, b.bytes - b.outputBytes);
  double read = device::readSeconds(operands, 1);
  if (threads > 1) read = std::min(read, device::readSeconds(operands, threads));
  double write = device::writeSeconds(b.outputBytes, 1);
  if (threads > 1) write = std::min(write, device::writeSeconds(b.outputBytes, threads));
  // Both in one pass: on machines where reads and writes do not overlap this
  // is near their sum, and a kernel must do both.
  double both = 0;
  if (operands > 0 && b.outputBytes > 0) {
    both = device::readWriteSeconds(operands, b.outputBytes, 1);
    if (threads > 1) both = std::min(both, device::readWriteSeconds(operands, b.outputBytes, threads));
  }
  double compute = peakFlopsPerCore > 0 ? b.flops / (peakFlopsPerCore * threads) : 0;
  double memory = std::max({read, write, both});
  if (compute >= memory) return Floor{compute * 1e6, "FLOPs at peak"};
  if (memory == read) return Floor{read * 1e6, "bytes read"};
  if (memory == write) return Floor{write * 1e6, "bytes written"};
  return Floor{both * 1e6, "bytes read and written"};
}

}  // namespace kiln::tune
