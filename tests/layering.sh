#!/bin/sh
# Catches: a layer that can include a header of a layer above it (the build's
# per-layer include views, CMakeLists.txt, let it through). Each probe is one
# #include compiled against one layer's view; upward ones must not be found.
#   tests/layering.sh <c++ compiler> <build>/layer_views
set -u
cxx=$1 views=$(cd "$2" && pwd) failures=0
cd "$(mktemp -d)" || exit 1  # quoted includes of stdin resolve against the working directory first
probe() {  # probe <layer> <header> <expect: found|refused>
  if printf '#include "%s"\n' "$2" | "$cxx" -std=c++20 -fsyntax-only -I "$views/$1" -x c++ - 2>/tmp/mt_layer_probe.err; then
    got=found
  elif grep -qE "No such file|file not found" /tmp/mt_layer_probe.err; then  # GCC | clang
    got=refused
  else
    got=found  # the header exists in the view; it failed for another reason
  fi
  if [ "$got" != "$3" ]; then
    echo "layering: $2 from the $1 layer was $got, expected $3"
    failures=$((failures + 1))
  fi
}
probe runtime runtime/launch.h found
probe runtime core/tensor.h refused
probe core runtime/half.h found
probe core kernels/dispatch.h refused
probe kernels core/tensor.h found
probe kernels autograd/autocast.h refused
probe autograd autograd/autocast.h found
probe autograd amp/grad_scaler.h refused
probe autograd nn/module.h refused
probe nn optim/optimizer.h refused
probe optim amp/grad_scaler.h refused
probe amp models/registry.h refused
probe amp distributed/ddp.h refused
probe distributed amp/grad_scaler.h found
probe distributed models/registry.h refused
probe models distributed/ddp.h found
probe models tools/data/dataset.h refused
probe tools_data models/registry.h found
probe tools_data tools/train/trainer.h refused
probe tools_train tools/data/dataset.h found
probe tools_train tools/cli/options.h refused
probe tools_data tools/cli/options.h refused
probe cli tools/train/trainer.h found
[ "$failures" = 0 ] && echo "layering: all probes as expected"
exit "$failures"
