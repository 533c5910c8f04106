// The ONNX Runtime child process: spawning node, and the line protocol.
#include "ort_process.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace kiln::bench {

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

const char* kPython = "/usr/bin/python3";  // Debian's, where python3-onnx lives

}  // namespace

OrtProcess::OrtProcess(std::string ortDir) : dir_(std::move(ortDir)) {
  if (dir_.empty()) {
    why_ = "--no-ort";
    return;
  }
  if (!exists(dir_ + "/node_modules/onnxruntime-node")) {
    why_ = "onnxruntime-node is not installed in " + dir_ + " (run scripts/install-bench-deps.sh)";
    return;
  }
  if (std::system((std::string(kPython) + " -c 'import onnx' 2>/dev/null").c_str()) != 0) {
    why_ = "python3-onnx is missing (run scripts/install-bench-deps.sh)";
    return;
  }
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0) {
    why_ = "pipe failed";
    return;
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::close(in[1]);
    ::close(out[0]);
    std::string script = dir_ + "/ort_runner.js";
    ::execlp("node", "node", script.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid_ < 0) {
    why_ = "fork failed";
    return;
  }
  to_ = ::fdopen(in[1], "w");
  from_ = ::fdopen(out[0], "r");
}

OrtProcess::~OrtProcess() {
  if (to_) std::fclose(to_);  // the runner exits at the end of its input
  if (from_) std::fclose(from_);
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
}

bool OrtProcess::buildModel(const std::string& dir, const std::string& kind, std::string& error) {
  std::string cmd = std::string(kPython) + " " + dir_ + "/onnx_models.py " + dir + " " + kind + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    error = "popen failed";
    return false;
  }
  char buf[512];
  std::string text;
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  int rc = ::pclose(p);
  if (rc != 0) error = "onnx_models.py " + kind + ": " + text;
  return rc == 0;
}

std::string OrtProcess::command(const std::string& line, std::string& error) {
  if (!to_ || !from_) {
    error = why_.empty() ? "the ORT runner is not running" : why_;
    return "";
  }
  std::fprintf(to_, "%s\n", line.c_str());
  std::fflush(to_);
  return readLine(error);
}

std::string OrtProcess::readLine(std::string& error) {
  std::string reply;
  char buf[65536];
  while (std::fgets(buf, sizeof buf, from_)) {
    reply += buf;
    if (!reply.empty() && reply.back() == '\n') break;
  }
  if (reply.empty()) error = "the ORT runner exited";
  if (reply.rfind("error ", 0) == 0) error = reply.substr(6);
  return error.empty() ? reply : "";
}

bool OrtProcess::load(const std::string& dir, int threads, std::string& error) {
  return command("load " + dir + " " + std::to_string(threads), error) == "ok\n";
}

bool OrtProcess::run(int iters, std::vector<double>& micros, std::vector<float>& output, std::string& error) {
  std::string times = command("run " + std::to_string(iters), error);
  if (times.rfind("times ", 0) != 0) return false;
  std::string out = readLine(error);
  if (out.rfind("out ", 0) != 0) return false;
  micros.clear();
  output.clear();
  std::istringstream t(times.substr(6)), o(out.substr(4));
  for (double v; t >> v;) micros.push_back(v);
  for (float v; o >> v;) output.push_back(v);
  return true;
}

}  // namespace kiln::bench
