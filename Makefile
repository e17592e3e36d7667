# The two entry points (see README.md):
#   make demo   install what is missing, build, run the headline demonstration
#   make test   install what is missing, build with -Werror, run the whole suite
#               (normal build, then ASan+UBSan build, then under Open MPI where
#               it is installed, then under MPICH 5 where `OVL_MPI=mpich5
#               scripts/install-deps` installed it), and check formatting
# Other targets: build, bench, test-tsan, build-openmpi, build-mpich5, format, format-check, clean,
#   stress (the randomized stress test over its matrix: SEEDS="1 2 3" MINUTES=30
#   STRESS_BUILD=build-asan; see scripts/stress).
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS       ?= 2
CTEST_ARGS ?= --output-on-failure -j2

.PHONY: all deps build demo test test-default test-asan test-tsan test-openmpi build-openmpi \
        test-mpich5 build-mpich5 format \
        format-check clean stress

all: build

deps:
	@scripts/install-deps

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DOVL_WERROR=ON
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo $(BUILD)

test: deps format-check test-default test-asan test-openmpi test-mpich5

# Also builds the library and examples at CMake's default build type
# (RelWithDebInfo, -O2), which warns where -O3 does not.
test-default:
	cmake -S . -B $(BUILD)-default -DOVL_WERROR=ON -DOVL_BUILD_TESTS=OFF -DOVL_BUILD_BENCH=OFF
	cmake --build $(BUILD)-default -j$(JOBS)
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DOVL_WERROR=ON
	cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) $(CTEST_ARGS)

test-asan:
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Asan -DOVL_WERROR=ON -DOVL_BUILD_BENCH=OFF
	cmake --build $(BUILD_ASAN) -j$(JOBS)
	ctest --test-dir $(BUILD_ASAN) $(CTEST_ARGS) -LE cluster

test-tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Tsan -DOVL_WERROR=ON -DOVL_BUILD_BENCH=OFF
	cmake --build $(BUILD_TSAN) -j$(JOBS)
	ctest --test-dir $(BUILD_TSAN) $(CTEST_ARGS) -LE cluster

# Open MPI must build too, and the suite (but the emulated cluster's tests,
# which need MPICH's launcher) runs under it, whenever its compiler wrapper
# is installed (`OVL_MPI=openmpi scripts/install-deps`). build-openmpi only
# builds.
OPENMPI_CMAKE = cmake -S . -B build-openmpi -DCMAKE_BUILD_TYPE=Release -DOVL_WERROR=ON \
	-DMPI_C_COMPILER=mpicc.openmpi -DMPIEXEC_EXECUTABLE=$$(command -v mpiexec.openmpi)

test-openmpi:
	@if command -v mpicc.openmpi >/dev/null 2>&1; then \
	  $(OPENMPI_CMAKE) -DOVL_BUILD_TESTS=ON && cmake --build build-openmpi -j$(JOBS) && \
	  ctest --test-dir build-openmpi $(CTEST_ARGS) -LE cluster; \
	else echo "test-openmpi: skipped (mpicc.openmpi not installed)"; fi

build-openmpi:
	@if command -v mpicc.openmpi >/dev/null 2>&1; then \
	  $(OPENMPI_CMAKE) && cmake --build build-openmpi -j$(JOBS) && echo "build-openmpi: ok"; \
	else echo "build-openmpi: skipped (mpicc.openmpi not installed)"; fi

# MPICH 5 from the package index (the `mpich` wheel), in the virtual
# environment `OVL_MPI=mpich5 scripts/install-deps` makes: the suite runs
# under it too (but the emulated cluster's tests, which use Debian's MPICH).
MPICH5_DIR ?= .deps/mpich5
MPICH5_CMAKE = cmake -S . -B build-mpich5 -DCMAKE_BUILD_TYPE=Release -DOVL_WERROR=ON \
	-DMPI_C_COMPILER=$(abspath $(MPICH5_DIR))/bin/mpicc \
	-DMPIEXEC_EXECUTABLE=$(abspath $(MPICH5_DIR))/bin/mpiexec

test-mpich5:
	@if [ -x $(MPICH5_DIR)/bin/mpicc ]; then \
	  $(MPICH5_CMAKE) -DOVL_BUILD_TESTS=ON && cmake --build build-mpich5 -j$(JOBS) && \
	  ctest --test-dir build-mpich5 $(CTEST_ARGS) -LE cluster; \
	else echo "test-mpich5: skipped (OVL_MPI=mpich5 scripts/install-deps installs it)"; fi

build-mpich5:
	@if [ -x $(MPICH5_DIR)/bin/mpicc ]; then \
	  $(MPICH5_CMAKE) && cmake --build build-mpich5 -j$(JOBS) && echo "build-mpich5: ok"; \
	else echo "build-mpich5: skipped (OVL_MPI=mpich5 scripts/install-deps installs it)"; fi

# The randomized stress test over ranks x progress x monitor (scripts/stress):
# SEEDS (default: 3 random), MINUTES (default 5), STRESS_BUILD (default
# build-stress, Release; a directory named *asan* or *tsan* gets that build).
SEEDS   ?=
MINUTES ?= 5
stress: deps
	SEEDS="$(SEEDS)" MINUTES="$(MINUTES)" JOBS="$(JOBS)" scripts/stress

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "format-check: ok"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) build-openmpi build-mpich5 $(BUILD)-default
