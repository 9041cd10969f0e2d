#!/usr/bin/env bash
# Install the Debian packages Tessera needs, and only those that are missing,
# so that a second run changes nothing and needs no network.
set -euo pipefail

missing=()
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# Packages checked by name (dpkg): later backends add theirs here.
for pkg in ${TESSERA_APT_PACKAGES:-}; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing Debian packages: ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "error: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Packages of another architecture (libcjson-dev:arm64 for the AArch64 cross build) need multiarch.
for pkg in "${missing[@]}"; do
  arch=${pkg##*:}
  if [ "$arch" != "$pkg" ] && ! { [ "$arch" = "$(dpkg --print-architecture)" ] || dpkg --print-foreign-architectures | grep -qx "$arch"; }; then
    "${sudo[@]}" dpkg --add-architecture "$arch"
  fi
done
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
