#!/usr/bin/env bash
# Builds the Android library for this Linux host, so that its JVM tests run here without an Android SDK:
#
#   build/android-host/libtessera_jni.so   the JNI bridge (tessera/src/main/cpp/*.c) linked against the host's
#                                          build/native/release/libtessera.so (found by its rpath)
#   build/android-host/tessera.jar         the platform-neutral Kotlin API (tessera/src/main/kotlin)
#   build/android-host/tessera-tests.jar   the JUnit 4 tests (tessera/src/test/kotlin)
#   build/android-host/test.classpath      what `java -cp` needs to run them (one line, ':'-separated)
#   build/android-host/test.java           the java of the JDK it built against
#
# Tools: kotlinc from the npm package kotlin-compiler (`make node-deps`), with kotlinx-coroutines-core-jvm
# from its lib/; OpenJDK 17 and junit4 from Debian (`make system-deps`); gcc; and `make native` first.
#
# Each output is rebuilt only when the SHA-256 of its inputs (sources, flags, tools) changes: kotlinc takes
# seconds even for a few files. Two builds at once (pytest workers) take turns on a lock.
#
# Usage: mobile/android/scripts/build-host.sh        (from anywhere; prints what it built and how long it took)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ANDROID="$(cd "$HERE/.." && pwd)"
ROOT="$(cd "$ANDROID/../.." && pwd)"
MODULE="$ANDROID/tessera"
OUT="$ROOT/build/android-host"
NATIVE="$ROOT/build/native/release"
KOTLIN_HOME="$ROOT/node_modules/kotlin-compiler"
JUNIT_JARS=(/usr/share/java/junit4.jar /usr/share/java/hamcrest.jar)

fail() {
    echo "build-host.sh: $*" >&2
    exit 1
}

# The JDK: $JAVA_HOME, else the one whose javac is on PATH (Debian's openjdk-17-jdk-headless).
if [[ -z "${JAVA_HOME:-}" ]]; then
    command -v javac >/dev/null 2>&1 || fail "javac is missing: install openjdk-17-jdk-headless (make system-deps)"
    JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
fi
[[ -f "$JAVA_HOME/include/jni.h" ]] || fail "$JAVA_HOME/include/jni.h is missing: JAVA_HOME must be a JDK"
[[ -x "$KOTLIN_HOME/bin/kotlinc" ]] || fail "$KOTLIN_HOME/bin/kotlinc is missing: run make node-deps"
COROUTINES="$KOTLIN_HOME/lib/kotlinx-coroutines-core-jvm.jar"
STDLIB="$KOTLIN_HOME/lib/kotlin-stdlib.jar"
[[ -f "$COROUTINES" && -f "$STDLIB" ]] || fail "$KOTLIN_HOME/lib lacks kotlin-stdlib.jar or kotlinx-coroutines-core-jvm.jar"
for jar in "${JUNIT_JARS[@]}"; do
    [[ -f "$jar" ]] || fail "$jar is missing: install junit4 (make system-deps)"
done
[[ -f "$NATIVE/libtessera.so" ]] || fail "$NATIVE/libtessera.so is missing: run make native"

mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

# sources DIR EXT: the files under DIR ending in EXT, sorted, so the hash does not depend on readdir order.
sources() {
    [[ -d "$1" ]] || return 0
    find "$1" -type f -name "*.$2" | LC_ALL=C sort
}

# fingerprint WORDS... FILES: one SHA-256 over the words (flags, versions) and the files' names and bytes.
fingerprint() {
    { printf '%s\n' "$@"; for f in "$@"; do [[ -f "$f" ]] && sha256sum "$f"; done; } | sha256sum | cut -d' ' -f1
}

# up_to_date OUTPUT HASH: the output exists and was built from inputs with this hash.
up_to_date() {
    [[ -f "$1" && -f "$1.sha256" && "$(cat "$1.sha256")" == "$2" ]]
}

stamp() {
    echo "$2" > "$1.sha256"
}

seconds_since() {
    echo "$(( $(date +%s%N) / 1000000 - $1 ))" | awk '{printf "%.1f", $1 / 1000}'
}

now_ms() {
    echo $(( $(date +%s%N) / 1000000 ))
}

# ---- the JNI bridge ------------------------------------------------------------------------------------
mapfile -t C_SOURCES < <(sources "$MODULE/src/main/cpp" c)
mapfile -t C_HEADERS < <(sources "$MODULE/src/main/cpp" h)
[[ ${#C_SOURCES[@]} -gt 0 ]] || fail "no C sources in $MODULE/src/main/cpp"
CFLAGS=(-std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden
        -I"$ROOT/runtime-native/include" -I"$JAVA_HOME/include" -I"$JAVA_HOME/include/linux")
LDFLAGS=(-L"$NATIVE" -Wl,-rpath,"$NATIVE" -ltessera -Wl,--no-undefined)
JNI_LIB="$OUT/libtessera_jni.so"
hash="$(fingerprint "$(gcc --version | head -n1)" "${CFLAGS[@]}" "${LDFLAGS[@]}" "${C_SOURCES[@]}" "${C_HEADERS[@]}" \
        "$ROOT/runtime-native/include/tessera.h" "$NATIVE/libtessera.so")"
if up_to_date "$JNI_LIB" "$hash"; then
    echo "libtessera_jni.so: up to date"
else
    start="$(now_ms)"
    gcc "${CFLAGS[@]}" "${C_SOURCES[@]}" "${LDFLAGS[@]}" -o "$JNI_LIB.tmp"
    mv "$JNI_LIB.tmp" "$JNI_LIB"
    stamp "$JNI_LIB" "$hash"
    echo "libtessera_jni.so: built in $(seconds_since "$start") s"
fi

# ---- Kotlin: one kotlinc call per jar (each starts a JVM and the compiler: seconds) ---------------------
KOTLIN_VERSION="$(cat "$KOTLIN_HOME/build.txt")"

# kotlin_jar OUTPUT CLASSPATH SOURCE_DIR WARNINGS: compile SOURCE_DIR's .kt files into the jar OUTPUT;
# WARNINGS is -Werror (the library: a warning fails the build) or -nowarn (the tests).
kotlin_jar() {
    local jar="$1" classpath="$2" dir="$3" name
    local -a KOTLINC=("$KOTLIN_HOME/bin/kotlinc" -J-Xmx1g -jvm-target 17 "$4")
    name="$(basename "$jar")"
    local -a files
    mapfile -t files < <(sources "$dir" kt)
    [[ ${#files[@]} -gt 0 ]] || fail "no Kotlin sources in $dir"
    local hash
    hash="$(fingerprint "$KOTLIN_VERSION" "${KOTLINC[@]}" "$classpath" "${files[@]}" ${classpath//:/ })"
    if up_to_date "$jar" "$hash"; then
        echo "$name: up to date"
        return
    fi
    local start
    start="$(now_ms)"
    rm -f "$jar.tmp.jar"
    "${KOTLINC[@]}" -cp "$classpath" -d "$jar.tmp.jar" "${files[@]}"
    mv "$jar.tmp.jar" "$jar"
    stamp "$jar" "$hash"
    echo "$name: compiled ${#files[@]} files in $(seconds_since "$start") s"
}

kotlin_jar "$OUT/tessera.jar" "$COROUTINES" "$MODULE/src/main/kotlin" -Werror
kotlin_jar "$OUT/tessera-tests.jar" "$OUT/tessera.jar:$COROUTINES:${JUNIT_JARS[0]}:${JUNIT_JARS[1]}" \
    "$MODULE/src/test/kotlin" -nowarn

# ---- what the tests run with ----------------------------------------------------------------------------
echo "$OUT/tessera-tests.jar:$OUT/tessera.jar:$STDLIB:$COROUTINES:${JUNIT_JARS[0]}:${JUNIT_JARS[1]}" \
    > "$OUT/test.classpath"
echo "$JAVA_HOME/bin/java" > "$OUT/test.java"
