// The pattern tables Kiln knows for its libraries (used when no pattern file
// names the library): what TVM's DNNL partitioning offers, for oneDNN.
#include "compiler/partition/builtin_patterns.h"

namespace kiln::partition {

namespace {

// Composites first, largest first: a product or convolution, its bias, an
// activation; GELU (its five operators); then what oneDNN takes one call at a time.
constexpr const char* kDnnl = R"(# oneDNN (dnnl): products and convolutions with their bias and activation
let conv = nn.conv2d(*, *)
let conv_bias = nn.bias_add(conv, *) | add(conv, *) | conv
composite dnnl.conv2d_bias_relu = nn.relu(conv_bias)
composite dnnl.conv2d_bias_sigmoid = sigmoid(conv_bias)
composite dnnl.conv2d_bias_tanh = tanh(conv_bias)
composite dnnl.conv2d_bias = nn.bias_add(conv, *) | add(conv, *)
let dense = nn.dense(*, *)
let dense_bias = add(dense, *) | nn.bias_add(dense, *) | dense
composite dnnl.dense_bias_relu = nn.relu(dense_bias)
composite dnnl.dense_bias_sigmoid = sigmoid(dense_bias)
composite dnnl.dense_bias_tanh = tanh(dense_bias)
composite dnnl.dense_bias = add(dense, *) | nn.bias_add(dense, *)
let matmul = nn.matmul(*, *)
let matmul_bias = add(matmul, *) | matmul
composite dnnl.matmul_bias_relu = nn.relu(matmul_bias)
composite dnnl.matmul_bias_sigmoid = sigmoid(matmul_bias)
composite dnnl.matmul_bias_tanh = tanh(matmul_bias)
composite dnnl.matmul_bias = add(matmul, *)
# GELU as TVM's patterns write it: x * (1 + erf(x / sqrt(2))) * 0.5
let gx = *
composite dnnl.gelu = multiply(multiply(gx, add(erf(divide(gx, const) | multiply(gx, const)), const)), const)
supports dnnl = (nn.conv2d(*, *) | nn.dense(*, *) | nn.matmul(*, *)) [dtype float32]
supports dnnl = (nn.relu(*) | sigmoid(*) | tanh(*) | add(*, *)) [dtype float32]
)";

}  // namespace

std::optional<PatternTable> builtinPatterns(const std::string& library) {
  if (library == "dnnl") return parsePatternTable(kDnnl, "<dnnl patterns>");
  return std::nullopt;
}

}  // namespace kiln::partition
