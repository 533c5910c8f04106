// Whole-file reads with the checks user-named paths need.
#include "base/read_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln {

namespace {

// An open descriptor of a regular file and its size; anything else is an Error naming it.
int openRegularFile(const std::string& path, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error("cannot read '" + path + "': " + (dir ? "it is a directory" : "it is not a regular file"));
  }
  size = static_cast<size_t>(st.st_size);
  return fd;
}

template <class Buffer>
Buffer readWhole(const std::string& path) {
  size_t size = 0;
  int fd = openRegularFile(path, size);
  Buffer out;
  out.resize(size);
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(out.data()) + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  // A file that shrank while being read is read as far as it goes.
  out.resize(got);
  return out;
}

}  // namespace

std::vector<uint8_t> readFileBytes(const std::string& path) { return readWhole<std::vector<uint8_t>>(path); }
std::string readFileText(const std::string& path) { return readWhole<std::string>(path); }

MappedFile::MappedFile(const std::string& path) {
  int fd = openRegularFile(path, size_);
  void* p = size_ ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p != MAP_FAILED) {
    data_ = static_cast<const char*>(p);
    mapped_ = true;
    return;
  }
  // Empty files and file systems without mmap: read instead.
  fallback_ = readFileBytes(path);
  data_ = reinterpret_cast<const char*>(fallback_.data());
  size_ = fallback_.size();
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace kiln
