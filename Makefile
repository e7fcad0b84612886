# The two commands of mixtape's README. Each installs what is missing,
# configures, builds and runs.
#   make train   builds what training needs and runs the main job
#   make test    builds everything (CUDA too, when nvcc is there) and runs the tests
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

# `make train` compiles CUDA device code only for a GPU this machine has
# (nvidia-smi sees one: CMake's "native", that GPU's architecture) or one
# asked for (make train CUDA_ARCHS=90a). Without either it builds the CPU
# back end and the simulator: nvcc building two architectures for a GPU that
# is not there was 41% of a first `make train` on a 2-core machine.
CUDA_ARCHS ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo native)
ifeq ($(strip $(CUDA_ARCHS)),)
TRAIN_CMAKE_ARGS := -DMT_CUDA=OFF
else
TRAIN_CMAKE_ARGS := -DMT_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)"
endif
# `make test` builds all CI compiles: CUDA for sm_80 and sm_90a when nvcc is
# found, and the tests. (Both share $(BUILD); switching between them
# reconfigures, and ccache makes the rebuild cheap.)
TEST_CMAKE_ARGS := -DMT_CUDA=AUTO "-DCMAKE_CUDA_ARCHITECTURES=80;90a" -DBUILD_TESTING=ON

.PHONY: train test sanitize setup configure build clean

setup:
	@tools/scripts/setup.sh

# configure-with ARGS: configure $(BUILD) with ARGS, then the user's CMAKE_ARGS.
define configure-with
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(1) $(CMAKE_ARGS) > $(BUILD).configure.log 2>&1 || \
	  (cat $(BUILD).configure.log; exit 1)
	@grep -E "mixtape:" $(BUILD).configure.log || true
endef

configure: setup
	$(call configure-with,$(TEST_CMAKE_ARGS))

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The embedded default: Fashion-MNIST, mixed precision, mlp on a CPU (cnn on a GPU), 3 epochs.
# Only what training needs is installed (setup.sh --train) and built: the CLI
# and the library under it, not the test suite.
train:
	@tools/scripts/setup.sh --train
	$(call configure-with,$(TRAIN_CMAKE_ARGS) -DBUILD_TESTING=OFF)
	@cmake --build $(BUILD) -j $(JOBS) --target mixtape_cli
	@$(BUILD)/mixtape train

# Tests run $(JOBS) at a time, each with OpenMP threads: libgomp's default
# spin-waiting barriers then starve each other on a 2-core machine (one
# gpt-tiny eval took minutes instead of seconds), so the test run waits
# passively. The tests time nothing, so this changes no result.
# The HTML report's browser test needs Chromium: only the test run installs it.
test: build
	@tools/scripts/setup.sh --browser
	@cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS)

# The sanitizer and fuzzing stage of CI (.ci/run runs it after `make test`):
# clang builds the CPU and sim code with ASan + UBSan and coverage for
# libFuzzer (CMakePresets.json: `sanitize`), runs the test suites in
# SANITIZE_SKIP's complement and every fuzz target of tests/fuzz for
# MT_FUZZ_SECONDS. A sanitizer report fails the test that caused it.
SANITIZE_SKIP ?= racecheck|parity_with_pytorch|checkpoints_load_in_pytorch|distributed_train_2_ranks|report_renders_in_chromium
sanitize: setup
	@cmake --preset sanitize > build-sanitize.configure.log 2>&1 || (cat build-sanitize.configure.log; exit 1)
	@grep -E "mixtape:" build-sanitize.configure.log || true
	@cmake --build --preset sanitize -j $(JOBS)
	@cd build-sanitize && OMP_WAIT_POLICY=passive ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -E '$(SANITIZE_SKIP)'

clean:
	rm -rf $(BUILD) $(BUILD).configure.log build-sanitize build-sanitize.configure.log
