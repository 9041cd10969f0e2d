#!/usr/bin/env bash
# Builds mobile/ios/Tessera.xcframework: runtime-native as a static library (libtessera.a, with cJSON and
# PCRE2 merged in) for iOS devices (arm64), the iOS Simulator (arm64 + x86_64) and macOS (arm64 + x86_64),
# with the Metal device on and Vulkan and OpenCL off.
#
# UNTESTED: this script was written on Linux without a Mac, Xcode or a Swift toolchain; it has never run.
# It needs Xcode (xcodebuild, xcrun, lipo, libtool), CMake 3.20+, curl and unzip.
#
# runtime-native finds cJSON and PCRE2 with pkg-config. Apple's SDKs have neither, so both are built
# here from pinned release archives (downloaded once into the work folder, their SHA-256 checked) and
# installed per slice, and runtime-native's configure step is pointed at that slice's pkg-config files.
#
# Usage: mobile/ios/scripts/build-xcframework.sh [WORK_DIR]   (default: mobile/ios/.build-xcframework)
set -euo pipefail

if [[ "$(uname -s)" != "Darwin" ]]; then
    echo "build-xcframework.sh: this builds Apple slices with Xcode and runs on macOS only (this is $(uname -s))." >&2
    echo "On Linux, runtime-native builds with: cmake -S runtime-native -B build/native/release" >&2
    exit 1
fi
for tool in xcodebuild xcrun cmake curl unzip shasum libtool lipo; do
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

# Pinned sources. The hashes are the ones Spack (cJSON) and other build recipes (PCRE2) publish for these
# archives; they could not be checked here (no network), so a mismatch stops the build rather than trusting it.
CJSON_VERSION=1.7.18
CJSON_URL="https://github.com/DaveGamble/cJSON/archive/refs/tags/v${CJSON_VERSION}.zip"
CJSON_SHA256=cc6d93cc3b659037c34193ecc7be5a874a18c2ac67b24efe82db6a759b486b5d
PCRE2_VERSION=10.42
PCRE2_URL="https://github.com/PCRE2Project/pcre2/releases/download/pcre2-${PCRE2_VERSION}"
PCRE2_URL="$PCRE2_URL/pcre2-${PCRE2_VERSION}.tar.bz2"
PCRE2_SHA256=8d36cd8cb6ea2a4c2bb358ff6411b0c788633a2a45dabbf1aeb4b701d1b5e840

mkdir -p "$WORK/downloads" "$WORK/src"

fetch() { # url file sha256
    local url="$1" file="$WORK/downloads/$2" want="$3"
    if [[ ! -f "$file" ]]; then
        curl -fL --retry 3 -o "$file.part" "$url"
        mv "$file.part" "$file"
    fi
    local got
    got="$(shasum -a 256 "$file" | cut -d' ' -f1)"
    if [[ "$got" != "$want" ]]; then
        echo "build-xcframework.sh: $2 has SHA-256 $got, not the pinned $want; remove it and check the pin." >&2
        exit 1
    fi
}

fetch "$CJSON_URL" "cJSON-${CJSON_VERSION}.zip" "$CJSON_SHA256"
fetch "$PCRE2_URL" "pcre2-${PCRE2_VERSION}.tar.bz2" "$PCRE2_SHA256"
CJSON_SRC="$WORK/src/cJSON-${CJSON_VERSION}"
PCRE2_SRC="$WORK/src/pcre2-${PCRE2_VERSION}"
[[ -d "$CJSON_SRC" ]] || unzip -q "$WORK/downloads/cJSON-${CJSON_VERSION}.zip" -d "$WORK/src"
[[ -d "$PCRE2_SRC" ]] || tar -xjf "$WORK/downloads/pcre2-${PCRE2_VERSION}.tar.bz2" -C "$WORK/src"

# build_slice NAME SYSTEM SYSROOT ARCHS DEPLOYMENT_TARGET (SYSTEM: iOS, or Darwin for the Mac itself)
# CMake's own Apple support (CMAKE_SYSTEM_NAME iOS/Darwin, CMAKE_OSX_SYSROOT, CMAKE_OSX_ARCHITECTURES) makes
# each slice; one slice may hold two architectures (a fat library), as an XCFramework slice may.
build_slice() {
    local name="$1" system="$2" sysroot="$3" archs="$4" target="$5"
    local build="$WORK/build/$name" prefix="$WORK/prefix/$name"
    local common=(
        -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_OSX_SYSROOT="$sysroot"
        -DCMAKE_OSX_ARCHITECTURES="$archs"
        -DCMAKE_OSX_DEPLOYMENT_TARGET="$target"
        -DCMAKE_INSTALL_PREFIX="$prefix"
        -DCMAKE_FIND_ROOT_PATH="$prefix"
        -DBUILD_SHARED_LIBS=OFF
    )
    if [[ "$system" != "Darwin" ]]; then
        common+=(-DCMAKE_SYSTEM_NAME="$system")
    fi
    echo "== $name: cJSON $CJSON_VERSION"
    cmake -S "$CJSON_SRC" -B "$build/cjson" "${common[@]}" -DENABLE_CJSON_TEST=OFF -DENABLE_CJSON_UTILS=OFF \
        -DENABLE_TARGET_EXPORT=OFF -DCJSON_BUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$build/cjson" -j "$JOBS" --target install >/dev/null
    echo "== $name: PCRE2 $PCRE2_VERSION"
    cmake -S "$PCRE2_SRC" -B "$build/pcre2" "${common[@]}" -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_BUILD_PCRE2_16=OFF \
        -DPCRE2_BUILD_PCRE2_32=OFF -DPCRE2_BUILD_PCRE2GREP=OFF -DPCRE2_BUILD_TESTS=OFF -DPCRE2_SUPPORT_JIT=OFF \
        >/dev/null
    cmake --build "$build/pcre2" -j "$JOBS" --target install >/dev/null
    echo "== $name: runtime-native (Metal)"
    # pkg-config reads only this slice's prefix, never the Mac's own (Homebrew) libraries.
    PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig" PKG_CONFIG_PATH="" \
        cmake -S "$ROOT/runtime-native" -B "$build/tessera" "${common[@]}" -DTESSERA_METAL=ON -DTESSERA_VULKAN=OFF \
        -DTESSERA_OPENCL=OFF -DTESSERA_TESTS=OFF -DTESSERA_SANITIZE=OFF >/dev/null
    cmake --build "$build/tessera" -j "$JOBS" --target tessera_static >/dev/null
    # One static library per slice: the app links libtessera.a alone, with no pkg-config of its own.
    mkdir -p "$WORK/lib/$name"
    libtool -static -o "$WORK/lib/$name/libtessera.a" "$build/tessera/libtessera.a" "$prefix/lib/libcjson.a" \
        "$prefix/lib/libpcre2-8.a"
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
