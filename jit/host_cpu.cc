// cpuid and xgetbv into a fingerprint string.
#include "jit/host_cpu.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <sys/utsname.h>

namespace kiln::jit {

namespace {
#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid(unsigned leaf, unsigned sub, unsigned maxLeaf) {
  Regs r;
  if (leaf <= maxLeaf) __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}
// cpuid leaf 0: the vendor string ("GenuineIntel", "AuthenticAMD") and the
// highest standard leaf.
struct Vendor {
  char name[13] = {};
  unsigned maxLeaf = 0;
};
Vendor vendorOf() {
  Vendor v;
  unsigned b = 0, c = 0, d = 0;
  __cpuid(0, v.maxLeaf, b, c, d);
  std::memcpy(v.name, &b, 4);
  std::memcpy(v.name + 4, &d, 4);
  std::memcpy(v.name + 8, &c, 4);
  return v;
}
// The family of cpuid leaf 1's eax: the base family, plus the extended family
// where the base is 0xf (every AMD Zen; Intel's are 6).
unsigned familyOf(unsigned eax) {
  unsigned family = (eax >> 8) & 0xf;
  return family == 0xf ? family + ((eax >> 20) & 0xff) : family;
}
std::string fingerprint() {
  const Vendor v = vendorOf();
  const unsigned maxLeaf = v.maxLeaf;
  unsigned maxExt = 0, eb = 0, ec = 0, ed = 0;
  __cpuid(0x80000000u, maxExt, eb, ec, ed);
  Regs l1 = cpuid(1, 0, maxLeaf), l7 = cpuid(7, 0, maxLeaf), l71 = cpuid(7, 1, maxLeaf), ld = cpuid(0xd, 1, maxLeaf);
  Regs e1 = cpuid(0x80000001u, 0, maxExt);
  unsigned family = familyOf(l1.a), model = (l1.a >> 4) & 0xf, stepping = l1.a & 0xf;
  if (family == 0x6 || family >= 0xf) model |= ((l1.a >> 16) & 0xf) << 4;
  uint64_t xcr0 = 0;
  if (l1.c & (1u << 27)) {  // OSXSAVE: xgetbv is available
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  // Leaf 1 ebx holds the APIC id and leaf 1 ecx/edx bits that differ between
  // cores are none; the words below are per-model constants.
  char buf[256];
  std::snprintf(buf, sizeof buf, "x86_64|%s|f%um%us%u|%08x.%08x.%08x.%08x.%08x.%08x.%08x.%08x.%08x|xcr0=%llx", v.name,
                family, model, stepping, l1.c & ~(1u << 27), l1.d, l7.b, l7.c, l7.d, l71.a, ld.a, e1.c, e1.d,
                static_cast<unsigned long long>(xcr0));
  return buf;
}
bool isIntel() { return std::strcmp(vendorOf().name, "GenuineIntel") == 0; }
unsigned amdFamily() {
  const Vendor v = vendorOf();
  if (std::strcmp(v.name, "AuthenticAMD") != 0) return 0;
  return familyOf(cpuid(1, 0, v.maxLeaf).a);
}
#else
bool isIntel() { return false; }
unsigned amdFamily() { return 0; }
std::string fingerprint() {
  utsname u{};
  uname(&u);
  return std::string(u.machine) + "|unknown-cpu";
}
#endif
}  // namespace

const std::string& hostCpuFingerprint() {
  static const std::string f = fingerprint();
  return f;
}

bool hostCpuIsIntel() {
  static const bool intel = isIntel();
  return intel;
}

unsigned hostCpuAmdFamily() {
  static const unsigned family = amdFamily();
  return family;
}

}  // namespace kiln::jit
