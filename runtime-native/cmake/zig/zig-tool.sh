#!/usr/bin/env sh
# CMake needs a compiler and an archiver it can run as one path; zig comes from PyPI's ziglang
# (`python -m ziglang`), so these wrappers stand in for it: cc, ar and ranlib are links to this
# file, which runs the zig tool of its own name. cc builds for aarch64-linux-musl
# (cmake/aarch64-linux-musl.cmake). The Python is TESSERA_ZIG_PYTHON, else the repository's .venv
# (make python-deps installs ziglang there), else python3.
here=$(cd "$(dirname "$0")" && pwd)
python=${TESSERA_ZIG_PYTHON:-}
if [ -z "$python" ]; then
    if [ -x "$here/../../../.venv/bin/python" ]; then python="$here/../../../.venv/bin/python"; else python=python3; fi
fi
if ! "$python" -c 'import ziglang' 2>/dev/null; then
    echo "$(basename "$0"): zig is missing: $python has no ziglang (pip install ziglang, or make python-deps;" \
         "TESSERA_ZIG_PYTHON names another Python)" >&2
    exit 127
fi
case "$(basename "$0")" in
    cc) exec "$python" -m ziglang cc -target aarch64-linux-musl "$@" ;;
    ar) exec "$python" -m ziglang ar "$@" ;;
    ranlib) exec "$python" -m ziglang ranlib "$@" ;;
    *) echo "zig-tool.sh: run it as cc, ar or ranlib (links to it)" >&2; exit 2 ;;
esac
