// ONNX Runtime beside Kiln in model_bench: the ONNX models built by
// bench/ort/onnx_models.py (python3-onnx) and run by bench/ort/ort_runner.js
// (onnxruntime-node), driven line by line over pipes so that the two runtimes
// can alternate within one run. Everything here is optional: available() says
// why ORT cannot run, and the bench then prints Kiln's figures alone.
#pragma once

#include <cstdio>
#include <string>
#include <sys/types.h>
#include <vector>

namespace kiln::bench {

class OrtProcess {
 public:
  // `ortDir` holds ort_runner.js, onnx_models.py and node_modules/onnxruntime-node
  // ("": ORT is not wanted).
  explicit OrtProcess(std::string ortDir);
  ~OrtProcess();
  OrtProcess(const OrtProcess&) = delete;
  OrtProcess& operator=(const OrtProcess&) = delete;

  // "" when ORT can run here, else the reason it cannot.
  const std::string& unavailable() const { return why_; }

  // Builds DIR/model.onnx of `kind` from the .npy weights in `dir`; false (with
  // the reason in `error`) if python3-onnx fails.
  bool buildModel(const std::string& dir, const std::string& kind, std::string& error);
  // Opens a session on DIR/model.onnx with `threads` intra-op threads.
  bool load(const std::string& dir, int threads, std::string& error);
  // Runs the loaded model `iters` times: per-run microseconds, and the output.
  bool run(int iters, std::vector<double>& micros, std::vector<float>& output, std::string& error);

 private:
  // Sends `line` and reads the first line of the reply; readLine reads the next.
  std::string command(const std::string& line, std::string& error);
  std::string readLine(std::string& error);
  std::string dir_, why_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

}  // namespace kiln::bench
