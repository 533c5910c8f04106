// A loader for the relocatable ELF objects of Kiln's CPU kernels (x86-64, PIC, small code model).
#include "jit/object_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/thread_pool.h"
#include "jit/conv2d.h"
#include "device/emu_block.h"
#include "jit/gemm.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

std::atomic<uint64_t> gMappedBytes{0};

// Kernels are tens of kilobytes; anything near this is not one of ours.
constexpr uint64_t kMaxImageBytes = uint64_t(256) << 20;

void* resolveExternal(const std::string& name) {
  // Kiln's own entry points by address, whether or not the process exports them.
  static const std::unordered_map<std::string, void*> runtime = {
      {"kiln_parallel_for", reinterpret_cast<void*>(&kiln_parallel_for)},
      {"kiln_sgemm", reinterpret_cast<void*>(&kiln_sgemm)},
      {"kiln_sgemm_packed", reinterpret_cast<void*>(&kiln_sgemm_packed)},
      {"kiln_sgemm_post", reinterpret_cast<void*>(&kiln_sgemm_post)},
      {"kiln_sgemm_packed_then", reinterpret_cast<void*>(&kiln_sgemm_packed_then)},
      {"kiln_sconv2d", reinterpret_cast<void*>(&kiln_sconv2d)},
      {"kiln_sconv2d_pair", reinterpret_cast<void*>(&kiln_sconv2d_pair)},
      // The emulated CUDA device's runtime, for GPU code compiled for the host.
      {"kiln_emu_sreg", reinterpret_cast<void*>(&kiln_emu_sreg)},
      {"kiln_emu_barrier", reinterpret_cast<void*>(&kiln_emu_barrier)},
      {"kiln_emu_barrier_reduce", reinterpret_cast<void*>(&kiln_emu_barrier_reduce)},
      {"kiln_emu_warp_sync", reinterpret_cast<void*>(&kiln_emu_warp_sync)},
      {"kiln_emu_shfl", reinterpret_cast<void*>(&kiln_emu_shfl)},
      {"kiln_emu_vote", reinterpret_cast<void*>(&kiln_emu_vote)},
      {"kiln_emu_shared", reinterpret_cast<void*>(&kiln_emu_shared)},
      {"kiln_emu_access", reinterpret_cast<void*>(&kiln_emu_access)},
  };
  if (auto it = runtime.find(name); it != runtime.end()) return it->second;
  // libm and libc (tanh, pow, memcpy, memset, ...), as the process has them.
  return dlsym(RTLD_DEFAULT, name.c_str());
}

class ObjectImage {
 public:
  ObjectImage(std::string_view bytes, const std::string& symbol) : bytes_(bytes), symbol_(symbol) {}
  ~ObjectImage() {
    if (base_ && !keep_) munmap(base_, size_);
  }
  ObjectImage(const ObjectImage&) = delete;
  ObjectImage& operator=(const ObjectImage&) = delete;

  KernelEntry load() {
    readHeaders();
    planLayout();
    map();
    relocate();
    KernelEntry entry = findEntry();
    protect();
    keep_ = true;
    gMappedBytes += size_;
    return entry;
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw Error("cannot load the kernel object for " + symbol_ + ": " + why);
  }
  bool inBounds(uint64_t offset, uint64_t size) const { return offset <= bytes_.size() && size <= bytes_.size() - offset; }
  template <class T>
  T read(uint64_t offset) const {
    if (!inBounds(offset, sizeof(T))) refuse("it is truncated");
    T v;
    std::memcpy(&v, bytes_.data() + offset, sizeof(T));
    return v;
  }
  // The NUL-terminated string at `offset` of string table section `table`.
  std::string_view stringAt(uint32_t table, uint64_t offset) const {
    const Elf64_Shdr& t = sections_[table];
    if (t.sh_type != SHT_STRTAB || offset >= t.sh_size) refuse("a name lies outside its string table");
    std::string_view s(bytes_.data() + t.sh_offset + offset, t.sh_size - offset);
    size_t end = s.find('\0');
    if (end == std::string_view::npos) refuse("a name is not terminated");
    return s.substr(0, end);
  }

  void readHeaders() {
    auto eh = read<Elf64_Ehdr>(0);
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) refuse("it is not an ELF file");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_type != ET_REL ||
        eh.e_machine != EM_X86_64)
      refuse("it is not a relocatable x86-64 object");
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum)
      refuse("its section table is malformed");
    if (!inBounds(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr))) refuse("its section table is truncated");
    for (uint32_t i = 0; i < eh.e_shnum; ++i) {
      auto sh = read<Elf64_Shdr>(eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr));
      if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !inBounds(sh.sh_offset, sh.sh_size))
        refuse("section " + std::to_string(i) + " lies outside the file");
      if (sh.sh_addralign > 4096 || (sh.sh_addralign & (sh.sh_addralign - 1)) != 0)
        refuse("section " + std::to_string(i) + " has an unusable alignment");
      sections_.push_back(sh);
    }
    shstrndx_ = eh.e_shstrndx;
    placed_.assign(sections_.size(), kNotLoaded);
    for (uint32_t i = 0; i < sections_.size(); ++i) {
      const Elf64_Shdr& sh = sections_[i];
      if (sh.sh_type == SHT_SYMTAB) {
        if (symtab_ != 0) refuse("it has two symbol tables");
        if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections_.size() ||
            sections_[sh.sh_link].sh_type != SHT_STRTAB)
          refuse("its symbol table is malformed");
        symtab_ = i;
      }
    }
    if (symtab_ == 0) refuse("it has no symbol table");
    numSymbols_ = sections_[symtab_].sh_size / sizeof(Elf64_Sym);
  }

  Elf64_Sym symbol(uint64_t index) const {
    if (index >= numSymbols_) refuse("a relocation names symbol " + std::to_string(index) + ", which does not exist");
    return read<Elf64_Sym>(sections_[symtab_].sh_offset + index * sizeof(Elf64_Sym));
  }

  // Sections that are part of the running image. Unwind tables are left out:
  // kernels are nounwind and nothing unwinds through them.
  bool isLoaded(const Elf64_Shdr& sh) const {
    if (!(sh.sh_flags & SHF_ALLOC)) return false;
    if (sh.sh_type == SHT_X86_64_UNWIND) return false;
    return stringAt(shstrndx_, sh.sh_name) != ".eh_frame";
  }

  // Reserves `size` bytes aligned to `align` at the end of a region.
  static uint64_t place(uint64_t& end, uint64_t size, uint64_t align, const ObjectImage& self) {
    align = align == 0 ? 1 : align;
    uint64_t start = (end + align - 1) / align * align;
    if (start > kMaxImageBytes || size > kMaxImageBytes - start) self.refuse("it is larger than any kernel");
    end = start + size;
    return start;
  }

  void planLayout() {
    // Which symbols need a GOT entry, and which external functions a jump stub.
    for (uint32_t i = 0; i < sections_.size(); ++i) {
      const Elf64_Shdr& sh = sections_[i];
      if (sh.sh_type != SHT_RELA && sh.sh_type != SHT_REL) continue;
      if (sh.sh_info >= sections_.size() || !isLoaded(sections_[sh.sh_info])) continue;
      if (sh.sh_type == SHT_REL) refuse("it has relocations without addends");
      if (sh.sh_entsize != sizeof(Elf64_Rela) || sh.sh_link != symtab_) refuse("a relocation section is malformed");
      relocationSections_.push_back(i);
      for (uint64_t off = 0; off + sizeof(Elf64_Rela) <= sh.sh_size; off += sizeof(Elf64_Rela)) {
        auto r = read<Elf64_Rela>(sh.sh_offset + off);
        uint32_t type = ELF64_R_TYPE(r.r_info);
        uint64_t sym = ELF64_R_SYM(r.r_info);
        if (type == R_X86_64_GOTPCREL || type == R_X86_64_GOTPCRELX || type == R_X86_64_REX_GOTPCRELX) {
          if (!got_.count(sym)) got_.emplace(sym, got_.size());
        } else if (type == R_X86_64_PLT32 && symbol(sym).st_shndx == SHN_UNDEF) {
          if (!stubs_.count(sym)) stubs_.emplace(sym, stubs_.size());
          if (!got_.count(sym)) got_.emplace(sym, got_.size());  // the stub jumps through it
        }
      }
    }
    uint64_t code = 0;
    for (uint32_t i = 0; i < sections_.size(); ++i)
      if (isLoaded(sections_[i]) && (sections_[i].sh_flags & SHF_EXECINSTR))
        placed_[i] = place(code, sections_[i].sh_size, sections_[i].sh_addralign, *this);
    stubsAt_ = place(code, stubs_.size() * kStubBytes, 16, *this);
    codeBytes_ = (code + pageSize() - 1) / pageSize() * pageSize();
    uint64_t data = codeBytes_;
    for (uint32_t i = 0; i < sections_.size(); ++i) {
      const Elf64_Shdr& sh = sections_[i];
      if (!isLoaded(sh) || (sh.sh_flags & SHF_EXECINSTR)) continue;
      placed_[i] = place(data, sh.sh_size, sh.sh_addralign, *this);
      writable_ |= (sh.sh_flags & SHF_WRITE) != 0;
    }
    gotAt_ = place(data, got_.size() * 8, 8, *this);
    size_ = std::max<uint64_t>((data + pageSize() - 1) / pageSize() * pageSize(), pageSize());
  }

  void map() {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("cannot map memory for the kernel " + symbol_);
    base_ = static_cast<char*>(p);
    for (uint32_t i = 0; i < sections_.size(); ++i)
      if (placed_[i] != kNotLoaded && sections_[i].sh_type != SHT_NOBITS)
        std::memcpy(base_ + placed_[i], bytes_.data() + sections_[i].sh_offset, sections_[i].sh_size);
  }

  // The run-time address of symbol `index`.
  uint64_t addressOf(uint64_t index) {
    Elf64_Sym s = symbol(index);
    if (s.st_shndx == SHN_UNDEF) {
      std::string name(stringAt(sections_[symtab_].sh_link, s.st_name));
      void* p = resolveExternal(name);
      if (!p) refuse("it calls '" + name + "', which this process does not define");
      return reinterpret_cast<uint64_t>(p);
    }
    if (s.st_shndx == SHN_ABS) return s.st_value;
    if (s.st_shndx >= sections_.size() || placed_[s.st_shndx] == kNotLoaded)
      refuse("a symbol lies in a section that is not loaded");
    if (s.st_value > sections_[s.st_shndx].sh_size) refuse("a symbol lies outside its section");
    return reinterpret_cast<uint64_t>(base_) + placed_[s.st_shndx] + s.st_value;
  }

  void relocate() {
    uint64_t base = reinterpret_cast<uint64_t>(base_);
    for (auto [sym, slot] : got_) {
      uint64_t target = addressOf(sym);
      std::memcpy(base_ + gotAt_ + slot * 8, &target, 8);
    }
    for (auto [sym, slot] : stubs_) {
      // jmp *[rip + disp32] to the function's GOT slot (stubs are in reach of the GOT).
      uint64_t gotSlot = gotAt_ + got_.at(sym) * 8;
      char* stub = base_ + stubsAt_ + slot * kStubBytes;
      int64_t disp = int64_t(gotSlot) - int64_t(stubsAt_ + slot * kStubBytes + 6);
      stub[0] = char(0xff);
      stub[1] = char(0x25);
      int32_t d32 = static_cast<int32_t>(disp);
      std::memcpy(stub + 2, &d32, 4);
      stub[6] = char(0xcc);
      stub[7] = char(0xcc);
    }
    for (uint32_t rs : relocationSections_) {
      const Elf64_Shdr& sh = sections_[rs];
      uint32_t target = sh.sh_info;
      const Elf64_Shdr& ts = sections_[target];
      if (ts.sh_type == SHT_NOBITS) refuse("it relocates a section without contents");
      for (uint64_t off = 0; off + sizeof(Elf64_Rela) <= sh.sh_size; off += sizeof(Elf64_Rela)) {
        auto r = read<Elf64_Rela>(sh.sh_offset + off);
        uint32_t type = ELF64_R_TYPE(r.r_info);
        uint64_t sym = ELF64_R_SYM(r.r_info);
        if (type == R_X86_64_NONE) continue;
        uint64_t width = (type == R_X86_64_64 || type == R_X86_64_PC64) ? 8 : 4;
        if (r.r_offset > ts.sh_size || width > ts.sh_size - r.r_offset) refuse("a relocation lies outside its section");
        uint64_t where = placed_[target] + r.r_offset;
        uint64_t P = base + where;
        uint64_t A = static_cast<uint64_t>(r.r_addend);
        switch (type) {
          case R_X86_64_64: write64(where, addressOf(sym) + A); break;
          case R_X86_64_PC64: write64(where, addressOf(sym) + A - P); break;
          case R_X86_64_PC32:
          case R_X86_64_PLT32: {
            auto st = stubs_.find(sym);
            uint64_t S = (type == R_X86_64_PLT32 && st != stubs_.end()) ? base + stubsAt_ + st->second * kStubBytes
                                                                         : addressOf(sym);
            writeSigned32(where, int64_t(S + A - P));
            break;
          }
          case R_X86_64_GOTPCREL:
          case R_X86_64_GOTPCRELX:
          case R_X86_64_REX_GOTPCRELX:
            writeSigned32(where, int64_t(base + gotAt_ + got_.at(sym) * 8 + A - P));
            break;
          case R_X86_64_32S: writeSigned32(where, int64_t(addressOf(sym) + A)); break;
          case R_X86_64_32: {
            uint64_t v = addressOf(sym) + A;
            if (v > std::numeric_limits<uint32_t>::max()) refuse("an absolute 32-bit address does not fit");
            uint32_t v32 = static_cast<uint32_t>(v);
            std::memcpy(base_ + where, &v32, 4);
            break;
          }
          default: refuse("it uses relocation type " + std::to_string(type) + ", which the loader does not know");
        }
      }
    }
  }

  void write64(uint64_t where, uint64_t v) { std::memcpy(base_ + where, &v, 8); }
  void writeSigned32(uint64_t where, int64_t v) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      refuse("a 32-bit relative reference does not reach its target");
    int32_t v32 = static_cast<int32_t>(v);
    std::memcpy(base_ + where, &v32, 4);
  }

  KernelEntry findEntry() const {
    const Elf64_Shdr& st = sections_[symtab_];
    for (uint64_t i = 0; i < numSymbols_; ++i) {
      auto s = read<Elf64_Sym>(st.sh_offset + i * sizeof(Elf64_Sym));
      if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF || s.st_shndx >= sections_.size()) continue;
      if (stringAt(st.sh_link, s.st_name) != symbol_) continue;
      if (placed_[s.st_shndx] == kNotLoaded || !(sections_[s.st_shndx].sh_flags & SHF_EXECINSTR) ||
          s.st_value >= sections_[s.st_shndx].sh_size)
        refuse("its entry point is not in its code");
      return reinterpret_cast<KernelEntry>(base_ + placed_[s.st_shndx] + s.st_value);
    }
    refuse("it does not define " + symbol_);
  }

  void protect() {
    if (codeBytes_ > 0 && mprotect(base_, codeBytes_, PROT_READ | PROT_EXEC) != 0)
      throw Error("cannot make the kernel " + symbol_ + "'s code executable");
    if (size_ > codeBytes_ && mprotect(base_ + codeBytes_, size_ - codeBytes_, writable_ ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
      throw Error("cannot protect the kernel " + symbol_ + "'s data");
  }

  static uint64_t pageSize() {
    static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    return size;
  }

  static constexpr uint64_t kNotLoaded = ~uint64_t(0);
  static constexpr uint64_t kStubBytes = 8;

  std::string_view bytes_;
  const std::string& symbol_;
  std::vector<Elf64_Shdr> sections_;
  std::vector<uint64_t> placed_;  // per section: its offset in the image, or kNotLoaded
  std::vector<uint32_t> relocationSections_;
  uint32_t shstrndx_ = 0, symtab_ = 0;
  uint64_t numSymbols_ = 0;
  std::unordered_map<uint64_t, uint64_t> got_;    // symbol -> GOT slot
  std::unordered_map<uint64_t, uint64_t> stubs_;  // external function -> stub slot
  uint64_t stubsAt_ = 0, gotAt_ = 0, codeBytes_ = 0, size_ = 0;
  bool writable_ = false;
  char* base_ = nullptr;
  bool keep_ = false;
};

struct Loaded {
  KernelEntry entry = nullptr;
  std::string object;  // kept: a disk cache or a precompiled section may ask for it later
};
struct LoadedKernels {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const Loaded>>> entries;
};
LoadedKernels& loadedKernels() {
  static LoadedKernels* k = new LoadedKernels;  // never destroyed: code outlives every static
  return *k;
}

}  // namespace

namespace {
const Loaded* findLoaded(const std::string& symbol) {
  LoadedKernels& d = loadedKernels();
  std::shared_future<std::shared_ptr<const Loaded>> f;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.entries.find(symbol);
    if (it == d.entries.end()) return nullptr;
    f = it->second;
  }
  try {
    return f.get().get();  // entries are never removed once loaded: the pointer stays valid
  } catch (const Error&) {
    return nullptr;  // the other load failed; the caller makes its own attempt
  }
}
}  // namespace

KernelEntry loadedKernel(const std::string& symbol) {
  const Loaded* l = findLoaded(symbol);
  return l ? l->entry : nullptr;
}

const std::string* loadedKernelObject(const std::string& symbol) {
  const Loaded* l = findLoaded(symbol);
  return l ? &l->object : nullptr;
}

KernelEntry loadKernelObject(std::string_view object, const std::string& symbol) {
  LoadedKernels& d = loadedKernels();
  std::promise<std::shared_ptr<const Loaded>> promise;
  std::shared_future<std::shared_ptr<const Loaded>> f;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.entries.find(symbol);
    if (it != d.entries.end()) {
      f = it->second;
    } else {
      f = promise.get_future().share();
      d.entries.emplace(symbol, f);
      mine = true;
    }
  }
  if (mine) {
    try {
      auto loaded = std::make_shared<Loaded>();
      loaded->entry = ObjectImage(object, symbol).load();
      loaded->object.assign(object.data(), object.size());
      promise.set_value(std::move(loaded));
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(d.mu);
      d.entries.erase(symbol);
    }
  }
  return f.get()->entry;
}

KernelEntry loadObjectUncached(std::string_view object, const std::string& symbol) {
  return ObjectImage(object, symbol).load();
}

uint64_t loadedObjectBytes() { return gMappedBytes.load(); }

}  // namespace kiln::jit
