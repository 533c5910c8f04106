// makeLibraryKernel: the implementation of each library of kernel_ir/library_support.h.
#include "jit/library_kernel.h"

#include "kernel_ir/library_support.h"
#include "kiln/error.h"

namespace kiln::jit {

#ifdef KILN_HAVE_DNNL
std::shared_ptr<const LibraryKernel> makeDnnlKernel(const kernel_ir::FusedFunction& f);
#endif

std::shared_ptr<const LibraryKernel> makeLibraryKernel(const kernel_ir::FusedFunction& f, Device device) {
  const kernel_ir::LibrarySupport* lib = kernel_ir::findLibrary(f.library);
  if (!lib) throw Error("kernel " + f.name + " names the library '" + f.library + "', which Kiln does not know");
  if (!lib->available)
    throw Error("kernel " + f.name + " needs the library '" + f.library + "', which this Kiln was built without");
  if (device.kind != Device::Kind::CPU)
    throw Error("kernel " + f.name + ": the library '" + f.library + "' runs on the CPU, not on " + device.toString());
  std::string why = lib->unsupported(f);
  if (!why.empty()) throw Error("kernel " + f.name + ": " + why);
#ifdef KILN_HAVE_DNNL
  if (f.library == "dnnl") return makeDnnlKernel(f);
#endif
  throw Error("internal: no implementation of the library '" + f.library + "'");
}

}  // namespace kiln::jit
