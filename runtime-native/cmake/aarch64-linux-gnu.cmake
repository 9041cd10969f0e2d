# Cross-building libtessera for AArch64 (a phone's CPU) with Debian's cross compiler and the arm64
# -dev packages installed through multiarch (dpkg --add-architecture arm64; libcjson-dev:arm64,
# libpcre2-dev:arm64). ctest runs the tests under qemu-user.
#   cmake -S runtime-native -B build/native/aarch64 -DCMAKE_TOOLCHAIN_FILE=runtime-native/cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
# Multiarch keeps arm64 libraries in /usr/lib/aarch64-linux-gnu, which Debian's cross gcc searches:
# pkg-config need only read the arm64 .pc files (and gives their -L there).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} /)
# ARMv8.2-A, the phones' baseline (and `tessera compile --cpu armv8.2-a`'s): its LSE atomics are
# single instructions, where ARMv8.0's load/store-exclusive loops crawl under qemu-user's emulation.
set(CMAKE_C_FLAGS_INIT "-march=armv8.2-a")
