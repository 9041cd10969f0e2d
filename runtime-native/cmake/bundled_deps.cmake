# TESSERA_BUNDLED_DEPS: cJSON and PCRE2 built here, from pinned source archives, as static,
# position-independent libraries (targets tessera_cjson and tessera_pcre2), for toolchains whose
# sysroot has neither: the Android NDK, Apple's SDKs, zig's musl (cmake/aarch64-linux-musl.cmake).
#
# The archives are Debian's copies of the upstream releases (the same versions bookworm's
# libcjson-dev and libpcre2-dev build from), fetched once into TESSERA_DEPS_DIR and checked against
# the SHA-256 below before anything is built from them. Offline, put the two files there by hand.
#
# Only what runtime-native uses is compiled: cJSON's one file, and PCRE2's 8-bit library with
# Unicode (the tokenizer's pre-tokenizer patterns use PCRE2_UTF | PCRE2_UCP). PCRE2's JIT is left
# out (pcre2_jit_compile.c then holds stubs that return PCRE2_ERROR_JIT_BADOPTION, and pcre2_match
# interprets, as src/tokenizer/unicode.c expects): the JIT's code generator is the one part that needs
# per-architecture and W^X care on phones.

set(TESSERA_CJSON_VERSION 1.7.15)
set(TESSERA_CJSON_URL http://deb.debian.org/debian/pool/main/c/cjson/cjson_${TESSERA_CJSON_VERSION}.orig.tar.gz)
set(TESSERA_CJSON_SHA256 5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2)
set(TESSERA_PCRE2_VERSION 10.42)
set(TESSERA_PCRE2_URL http://deb.debian.org/debian/pool/main/p/pcre2/pcre2_${TESSERA_PCRE2_VERSION}.orig.tar.gz)
set(TESSERA_PCRE2_SHA256 c33b418e3b936ee3153de2c61cc638e7e4fe3156022a5c77d0711bcbb9d64f1f)

# One download folder for every build folder, so that a new build (or a new toolchain) downloads nothing.
if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(tessera_default_deps_dir "$ENV{XDG_CACHE_HOME}/tessera/deps")
else()
  set(tessera_default_deps_dir "$ENV{HOME}/.cache/tessera/deps")
endif()
set(TESSERA_DEPS_DIR "${tessera_default_deps_dir}" CACHE PATH
    "Where TESSERA_BUNDLED_DEPS keeps (or finds) the cJSON and PCRE2 source archives")

# tessera_bundled_source(NAME URL SHA256 TOP OUT): the archive at URL, in TESSERA_DEPS_DIR (downloaded
# when it is not there), checked, and unpacked into the build folder; OUT names its top folder TOP.
function(tessera_bundled_source name url sha256 top out)
  get_filename_component(file_name "${url}" NAME)
  set(archive "${TESSERA_DEPS_DIR}/${file_name}")
  string(CONCAT how_to_fix "download ${url} into ${TESSERA_DEPS_DIR} by hand (or configure with -DTESSERA_DEPS_DIR=a folder "
                 "that holds it), or build without -DTESSERA_BUNDLED_DEPS=ON, with the system's ${name} found "
                 "through pkg-config")
  if(EXISTS "${archive}")
    file(SHA256 "${archive}" got)
  endif()
  if(NOT EXISTS "${archive}" OR NOT got STREQUAL sha256)
    file(MAKE_DIRECTORY "${TESSERA_DEPS_DIR}")
    message(STATUS "TESSERA_BUNDLED_DEPS: downloading ${url}")
    file(DOWNLOAD "${url}" "${archive}.part" STATUS status TIMEOUT 300 INACTIVITY_TIMEOUT 60)
    list(GET status 0 code)
    if(NOT code EQUAL 0)
      list(GET status 1 reason)
      file(REMOVE "${archive}.part")
      message(FATAL_ERROR "TESSERA_BUNDLED_DEPS: could not download ${name}'s source (${reason}); ${how_to_fix}.")
    endif()
    file(SHA256 "${archive}.part" got)
    if(NOT got STREQUAL sha256)
      file(REMOVE "${archive}.part")
      message(FATAL_ERROR "TESSERA_BUNDLED_DEPS: ${url} has SHA-256 ${got}, not the pinned ${sha256}: "
                          "refusing to build from it; ${how_to_fix}.")
    endif()
    file(RENAME "${archive}.part" "${archive}")
  endif()
  # Unpacked again only when the pinned archive changes (a stamp holds the hash it came from).
  set(unpacked "${CMAKE_BINARY_DIR}/_deps/${top}")
  set(stamp "${CMAKE_BINARY_DIR}/_deps/${top}.sha256")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" unpacked_from)
  endif()
  if(NOT EXISTS "${unpacked}" OR NOT unpacked_from STREQUAL sha256)
    file(REMOVE_RECURSE "${unpacked}")
    file(ARCHIVE_EXTRACT INPUT "${archive}" DESTINATION "${CMAKE_BINARY_DIR}/_deps")
    if(NOT EXISTS "${unpacked}")
      message(FATAL_ERROR "TESSERA_BUNDLED_DEPS: ${archive} holds no ${top}/ folder; ${how_to_fix}.")
    endif()
    file(WRITE "${stamp}" "${sha256}")
  endif()
  set(${out} "${unpacked}" PARENT_SCOPE)
endfunction()

tessera_bundled_source(cJSON ${TESSERA_CJSON_URL} ${TESSERA_CJSON_SHA256} cJSON-${TESSERA_CJSON_VERSION} cjson_src)
tessera_bundled_source(PCRE2 ${TESSERA_PCRE2_URL} ${TESSERA_PCRE2_SHA256} pcre2-${TESSERA_PCRE2_VERSION} pcre2_src)

# The headers as runtime-native includes them (<cjson/cJSON.h>, <pcre2.h>), in a folder of their own so
# that nothing else of the sources is on the include path.
set(tessera_deps_include "${CMAKE_BINARY_DIR}/_deps/include")
configure_file("${cjson_src}/cJSON.h" "${tessera_deps_include}/cjson/cJSON.h" COPYONLY)
configure_file("${pcre2_src}/src/pcre2.h.generic" "${tessera_deps_include}/pcre2.h" COPYONLY)
# PCRE2's own build makes these two from the shipped defaults (every feature test left to the macros below).
configure_file("${pcre2_src}/src/config.h.generic" "${CMAKE_BINARY_DIR}/_deps/pcre2-config/config.h" COPYONLY)
configure_file("${pcre2_src}/src/pcre2_chartables.c.dist" "${CMAKE_BINARY_DIR}/_deps/pcre2-config/pcre2_chartables.c"
               COPYONLY)

# Third-party code: built with its authors' defaults and without this project's -Werror (these targets
# are made before runtime-native's own warning flags are set).
add_library(tessera_cjson STATIC "${cjson_src}/cJSON.c")
target_include_directories(tessera_cjson PUBLIC "${tessera_deps_include}")
target_compile_options(tessera_cjson PRIVATE -w)
# cJSON.c is C89 and uses no extensions; its number printing needs libm.
target_link_libraries(tessera_cjson PUBLIC m)

set(tessera_pcre2_sources auto_possess compile config context convert dfa_match error extuni find_bracket
    jit_compile maketables match match_data newline ord2utf pattern_info script_run serialize string_utils study substitute
    substring tables ucd valid_utf xclass)
list(TRANSFORM tessera_pcre2_sources REPLACE "(.+)" "${pcre2_src}/src/pcre2_\\1.c")
add_library(tessera_pcre2 STATIC ${tessera_pcre2_sources} "${CMAKE_BINARY_DIR}/_deps/pcre2-config/pcre2_chartables.c")
target_include_directories(tessera_pcre2 PUBLIC "${tessera_deps_include}"
                           PRIVATE "${CMAKE_BINARY_DIR}/_deps/pcre2-config" "${pcre2_src}/src")
target_compile_definitions(tessera_pcre2 PUBLIC PCRE2_STATIC
                           PRIVATE HAVE_CONFIG_H PCRE2_CODE_UNIT_WIDTH=8 SUPPORT_UNICODE HAVE_STDINT_H HAVE_INTTYPES_H
                                   HAVE_LIMITS_H HAVE_STDLIB_H HAVE_STRING_H HAVE_MEMMOVE HAVE_STRERROR)
target_compile_options(tessera_pcre2 PRIVATE -w)

set(TESSERA_DEPENDENCY_TARGETS tessera_cjson tessera_pcre2)
