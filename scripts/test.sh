#!/usr/bin/env bash
# Run lemonpack's whole test suite, installing what it needs when it is missing:
# Debian packages (nix, skopeo, umoci, podman, runc, busybox-static), the Python test
# dependencies, and the podman settings (through CONTAINERS_CONF, never by editing the
# machine). Extra arguments go to pytest, e.g. `scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(nix-bin skopeo umoci podman runc busybox-static)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
"$PYTHON" -m pip install -q -e '.[test]' 2>&1 | grep -v -e '^WARNING: Running pip as' -e 'is ignored: it is neither' || true

export CONTAINERS_CONF="$PWD/tests/containers.conf"
exec "$PYTHON" -m pytest -q "$@"
