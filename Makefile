# The two commands of mixtape's README. Each installs what is missing,
# configures, builds and runs.
#   make train   builds and runs the main job
#   make test    builds everything (CUDA too, when nvcc is there) and runs the tests
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: train test setup configure build clean

setup:
	@tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) > $(BUILD).configure.log 2>&1 || \
	  (cat $(BUILD).configure.log; exit 1)
	@grep -E "mixtape:" $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The embedded default: Fashion-MNIST, mixed precision, mlp on a CPU (cnn on a GPU), 3 epochs.
# Only the CLI and the library under it are built, not the test suite.
train: configure
	@cmake --build $(BUILD) -j $(JOBS) --target mixtape_cli
	@$(BUILD)/mixtape train

# Tests run $(JOBS) at a time, each with OpenMP threads: libgomp's default
# spin-waiting barriers then starve each other on a 2-core machine (one
# gpt-tiny eval took minutes instead of seconds), so the test run waits
# passively. The tests time nothing, so this changes no result.
test: build
	@cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
