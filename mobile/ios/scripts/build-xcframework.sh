#!/usr/bin/env bash
# Builds mobile/ios/Tessera.xcframework: runtime-native as a static library (libtessera.a, with cJSON and
# PCRE2 merged in) for iOS devices (arm64), the iOS Simulator (arm64 + x86_64) and macOS (arm64 + x86_64),
# with the Metal device on and Vulkan and OpenCL off.
#
# UNTESTED: this script was written on Linux without a Mac, Xcode or a Swift toolchain; it has never run.
# It needs Xcode (xcodebuild, xcrun, lipo, libtool) and CMake 3.20+.
#
# Apple's SDKs have no cJSON or PCRE2, so runtime-native builds both from source with
# -DTESSERA_BUNDLED_DEPS=ON: Debian's release archives (cJSON 1.7.15, PCRE2 10.42), pinned by SHA-256 and
# checked by CMake (the same archives and pins the Android NDK build and the musl cross build of `make test`
# use), downloaded once into ~/.cache/tessera/deps (or TESSERA_DEPS_DIR).
#
# Usage: mobile/ios/scripts/build-xcframework.sh [WORK_DIR]   (default: mobile/ios/.build-xcframework)
set -euo pipefail

if [[ "$(uname -s)" != "Darwin" ]]; then
    echo "build-xcframework.sh: this builds Apple slices with Xcode and runs on macOS only (this is $(uname -s))." >&2
    echo "On Linux, runtime-native builds with: cmake -S runtime-native -B build/native/release" >&2
    exit 1
fi
for tool in xcodebuild xcrun cmake libtool lipo; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build-xcframework.sh: $tool is missing (install Xcode, its command line tools, and CMake)." >&2
        exit 1
    fi
done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IOS="$(cd "$HERE/.." && pwd)"
ROOT="$(cd "$IOS/../.." && pwd)"
WORK="${1:-$IOS/.build-xcframework}"
OUT="$IOS/Tessera.xcframework"
JOBS="$(sysctl -n hw.ncpu)"
IOS_MIN=15.0
MACOS_MIN=12.0

DEPS_DIR="${TESSERA_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/deps}"
mkdir -p "$WORK" "$DEPS_DIR"

# build_slice NAME SYSTEM SYSROOT ARCHS DEPLOYMENT_TARGET (SYSTEM: iOS, or Darwin for the Mac itself)
# CMake's own Apple support (CMAKE_SYSTEM_NAME iOS/Darwin, CMAKE_OSX_SYSROOT, CMAKE_OSX_ARCHITECTURES) makes
# each slice; one slice may hold two architectures (a fat library), as an XCFramework slice may.
build_slice() {
    local name="$1" system="$2" sysroot="$3" archs="$4" target="$5"
    local build="$WORK/build/$name"
    local common=(
        -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_OSX_SYSROOT="$sysroot"
        -DCMAKE_OSX_ARCHITECTURES="$archs"
        -DCMAKE_OSX_DEPLOYMENT_TARGET="$target"
    )
    if [[ "$system" != "Darwin" ]]; then
        common+=(-DCMAKE_SYSTEM_NAME="$system")
    fi
    echo "== $name: runtime-native (Metal), with cJSON and PCRE2 from pinned sources"
    cmake -S "$ROOT/runtime-native" -B "$build" "${common[@]}" -DTESSERA_METAL=ON -DTESSERA_VULKAN=OFF \
        -DTESSERA_OPENCL=OFF -DTESSERA_TESTS=OFF -DTESSERA_SANITIZE=OFF -DTESSERA_BUNDLED_DEPS=ON \
        -DTESSERA_DEPS_DIR="$DEPS_DIR" >/dev/null
    cmake --build "$build" -j "$JOBS" --target tessera_static tessera_cjson tessera_pcre2 >/dev/null
    # One static library per slice: the app links libtessera.a alone.
    mkdir -p "$WORK/lib/$name"
    libtool -static -o "$WORK/lib/$name/libtessera.a" "$build/libtessera.a" "$build/libtessera_cjson.a" \
        "$build/libtessera_pcre2.a"
    lipo -info "$WORK/lib/$name/libtessera.a"
}

build_slice ios-arm64 iOS iphoneos arm64 "$IOS_MIN"
build_slice ios-simulator iOS iphonesimulator "arm64;x86_64" "$IOS_MIN"
build_slice macos Darwin macosx "arm64;x86_64" "$MACOS_MIN"

# The headers the framework carries: tessera.h alone. The Swift package's CTessera module map (Sources/CTessera)
# is the module; a second module map here would define CTessera twice.
HEADERS="$WORK/headers"
rm -rf "$HEADERS"
mkdir -p "$HEADERS"
cp "$ROOT/runtime-native/include/tessera.h" "$HEADERS/"

rm -rf "$OUT"
xcodebuild -create-xcframework \
    -library "$WORK/lib/ios-arm64/libtessera.a" -headers "$HEADERS" \
    -library "$WORK/lib/ios-simulator/libtessera.a" -headers "$HEADERS" \
    -library "$WORK/lib/macos/libtessera.a" -headers "$HEADERS" \
    -output "$OUT"
echo "wrote $OUT"
