# Cross-building libtessera for AArch64 with musl instead of glibc: zig's clang and its musl
# (PyPI's ziglang, through the wrappers in cmake/zig/), with cJSON and PCRE2 built from pinned
# sources (TESSERA_BUNDLED_DEPS: zig's sysroot has no packages). ctest runs the tests under qemu-user.
#   cmake -S runtime-native -B build/native/aarch64-musl -DCMAKE_TOOLCHAIN_FILE=runtime-native/cmake/aarch64-linux-musl.cmake
#
# Executables link musl dynamically, not statically: a static musl program's dlopen always fails
# ("Dynamic loading not supported"), and runtime-native opens a model's CPU kernels (kernels.so) and
# the Vulkan and OpenCL loaders with dlopen. zig links against its own musl (headers and a stub
# libc.so); at run time the program's interpreter is /lib/ld-musl-aarch64.so.1, which Debian's
# musl:arm64 package installs (it is musl's libc.so itself), so qemu-aarch64 needs no -L.
# The GPU devices are built as on any Linux: their loaders are opened when a model asks for one, and
# without one (none is installed for AArch64 here) the device says so by name.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER ${CMAKE_CURRENT_LIST_DIR}/zig/cc)
set(CMAKE_AR ${CMAKE_CURRENT_LIST_DIR}/zig/ar CACHE FILEPATH "zig's ar")
set(CMAKE_RANLIB ${CMAKE_CURRENT_LIST_DIR}/zig/ranlib CACHE FILEPATH "zig's ranlib")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# Debian 12's qemu-user hangs in a glibc guest's pthread_create, not in musl's: the thread pool's test runs.
set(TESSERA_EMULATOR_RUNS_THREADS ON)
set(TESSERA_BUNDLED_DEPS ON CACHE BOOL "zig's musl sysroot has no cJSON or PCRE2 packages")
# ARMv8.2-A, as in aarch64-linux-gnu.cmake (zig spells -march=armv8.2-a as below). zig's clang adds
# UndefinedBehaviorSanitizer's runtime to unoptimized builds, and that runtime calls statx, which
# musl 1.2.3 (Debian's, the loader here) lacks: left out.
set(CMAKE_C_FLAGS_INIT "-mcpu=generic+v8_2a -fno-sanitize=undefined")
# zig's clang makes static executables for musl unless told otherwise.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-dynamic")
