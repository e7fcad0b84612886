#!/usr/bin/env bash
# mixtape as a user's project sees it: install the build into a fresh prefix,
# then configure, build and run tests/package/consumer against it with
# find_package(mixtape), knowing nothing of the source tree.
#
# Catches: a header or library left out of the install, an exported target
# that points back into the build or source tree, a dependency the package
# config forgets to find, and components that are reported but not checked.
#   package_test.sh <build dir> <consumer source dir> "<components this build has>"
set -euo pipefail
build=$1
consumer=$2
present=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
test -f "$prefix/include/mixtape/mixtape.h"
test -f "$prefix/lib/cmake/mixtape/mixtapeConfig.cmake"
# The installed package must stand on its own: no path into the build or source tree.
source_dir=$(cd "$consumer/../../.." && pwd)
if grep -rlF -e "$(cd "$build" && pwd)" -e "$source_dir/" "$prefix/lib/cmake/mixtape"; then
  echo "package_test: the installed CMake files above point into the build or source tree" >&2
  exit 1
fi

launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
configure() {  # configure <build dir> [extra cmake args...]
  local dir=$1
  shift
  cmake -S "$consumer" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    "${launcher[@]}" "$@"
}

configure "$work/consumer" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/consumer/consumer"

# Components: the ones this build has are found; one it lacks fails find_package.
if [ -n "$present" ]; then
  configure "$work/with_components" "-DMT_CONSUMER_COMPONENTS=${present// /;}" > "$work/components.log" 2>&1 ||
    { cat "$work/components.log"; echo "package_test: components '$present' were not found" >&2; exit 1; }
fi
missing=Vulkan  # no mixtape has it
for component in CUDA cuDNN MPI NCCL; do
  case " $present " in *" $component "*) ;; *) missing=$component; break ;; esac
done
if configure "$work/without" "-DMT_CONSUMER_COMPONENTS=$missing" > "$work/missing.log" 2>&1; then
  echo "package_test: find_package(mixtape COMPONENTS $missing) succeeded, but this build lacks it" >&2
  exit 1
fi
grep -q "mixtape" "$work/missing.log"
echo "package_test: installed, built and ran the consumer; components '$present' found, '$missing' refused"
