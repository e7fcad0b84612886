// core is a layer of its own: a program that links only mt_core builds, makes
// and reads tensors, and gets a clear mt::Error (not an undefined symbol or a
// null call) from a differentiable method, whose implementation lives in the
// autograd layer it did not link.
//
// Catches: core/ calling up into autograd/ or kernels/ again (the link
// fails), and a method table left empty being called through a null pointer.
#include <cstdio>
#include <string>

#include "core/tensor.h"

int main() {
  const mt::Tensor x = mt::full({2, 3}, 1.5);
  if (x.numel() != 6 || x.to_vector().at(4) != 1.5) {
    std::puts("core_links_alone: full() gave the wrong tensor");
    return 1;
  }
  try {
    (void)x.reshape({3, 2});
  } catch (const mt::Error& e) {
    if (std::string(e.what()).find("autograd layer") != std::string::npos) {
      std::puts("core_links_alone: core links alone; reshape() names the missing autograd layer");
      return 0;
    }
    std::printf("core_links_alone: unexpected message: %s\n", e.what());
    return 1;
  }
  std::puts("core_links_alone: reshape() ran without the autograd layer");
  return 1;
}
