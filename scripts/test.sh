#!/usr/bin/env bash
# Run lemonpack's whole test suite, installing what it needs when it is missing:
# Debian packages (nix, skopeo, umoci, podman, runc, busybox-static, docker-registry, g++), the Python test
# dependencies, and the podman settings (through CONTAINERS_CONF, never by editing the
# machine). Extra arguments go to pytest, e.g. `scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(nix-bin patchelf skopeo umoci podman runc busybox-static docker-registry g++ g++-aarch64-linux-gnu
              qemu-user-static chromium chromium-driver mmdebstrap xfsprogs
              python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Wait (up to 10 minutes) for another apt/dpkg to release its lock instead of failing at once.
  APT_OPTS=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${APT_OPTS[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${APT_OPTS[@]}" install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
# A failed install stops the run (its output is shown); only pip's known-harmless warnings are hidden.
if ! pip_out=$("$PYTHON" -m pip install -q -e '.[test]' 2>&1); then
  echo "$pip_out" >&2
  echo "scripts/test.sh: installing the Python test dependencies failed" >&2
  exit 1
fi
echo "$pip_out" | grep -v -e '^WARNING: Running pip as' -e 'is ignored: it is neither' -e '^$' >&2 || :

# The Nix tests build with nix/offline-nixpkgs (no nixpkgs here): its python3 is a virtual
# environment of Debian's python3 holding lemonpack's dependencies, which Nix's build users
# can read (they cannot enter /root, where pyenv lives).
if ! venv_out=$(nix/offline-nixpkgs/host-python.sh pyproject.toml 2>&1); then
  echo "$venv_out" >&2
  echo "scripts/test.sh: preparing the Python of nix/offline-nixpkgs failed" >&2
  exit 1
fi

# Lint and type check first (rules in pyproject.toml [tool.ruff.lint] and [tool.mypy]): an undefined
# name or a wrong type fails in seconds, not after the suite.
"$PYTHON" -m ruff check --no-cache --quiet lemonpack tests bench scripts
# Then the type check (rules and scope in pyproject.toml [tool.mypy]).
"$PYTHON" -m mypy

export CONTAINERS_CONF="$PWD/tests/containers.conf"
# Screenshots of the browser tests (the catalogue site) are kept here as the run's artifacts.
export LEMONPACK_TEST_ARTIFACTS="${LEMONPACK_TEST_ARTIFACTS:-$PWD/test-artifacts}"

# The real-engine tests need llama-server: build it (once per machine, cached outside the repo,
# bounded to the machine's cores, with progress) before pytest starts, unless only fast tests run.
case " $* " in
  *"not slow"*) ;;
  *) "$PYTHON" tests/support/llama_server.py >/dev/null ;;
esac
exec "$PYTHON" -m pytest -q "$@"
