#!/usr/bin/env bash
# Installs everything redlock needs to build, test, bench and package on Debian 12.
#
# Idempotent and fast when nothing is missing: the packages are checked with dpkg-query
# first, and apt-get runs only for the ones that are not installed. Runs as root, or
# re-runs itself through sudo.
#
# The tests start their own redis-server on loopback; the Debian package's system
# service is neither needed nor started (a policy-rc.d keeps apt from starting it), and
# when this run installed it, it is disabled at boot too.
set -euo pipefail

packages=(
    # build
    g++ cmake make pkg-config
    libcli11-dev libhiredis-dev libtomlplusplus-dev libfmt-dev doctest-dev libssl-dev
    libmicrohttpd-dev
    # test
    redis-server python3 util-linux bsdutils procps clang-format spin faketime openssl
    # the oracle of cron expressions (tests/e2e/test_cron_oracle.py), never a dependency
    python3-croniter
    # monitoring tests: promtool, a real node_exporter, systemd-analyze verify, curl; the
    # exporter's page in headless Chromium (tests/e2e/test_exporter.py, about 10 s; the
    # package is the biggest here, ~100 MB, installed once per CI machine)
    prometheus prometheus-node-exporter systemd curl chromium
    # bench
    hyperfine valgrind time strace
    # packaging tests
    dpkg-dev fakeroot groff man-db bash-completion zsh fish lintian
    # release artifacts (scripts/release.sh) and their tests: the aarch64 cross compiler,
    # rpm, Debian roots to run the binaries in, qemu for aarch64
    ninja-build g++-aarch64-linux-gnu rpm rpmlint debootstrap qemu-user-static file
)

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != installed ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "setup: all ${#packages[@]} packages already installed"
    exit 0
fi

if ((EUID != 0)); then
    if command -v sudo >/dev/null; then
        echo "setup: installing ${missing[*]} (through sudo)"
        exec sudo --preserve-env=DEBIAN_FRONTEND bash "$0" "$@"
    fi
    echo "setup: must run as root (or with sudo) to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "setup: installing ${missing[*]}"

# Keep apt from starting redis-server's system service: nothing here uses it, and on a
# machine without an init system starting it only fails. Docker images already ship a
# policy-rc.d that says no; only add (and later remove) ours when there is none.
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# added by redlock scripts/setup.sh for the duration of the install\nexit 101\n' \
        >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

apt_install() {
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# apt-get update once: when there are no package lists at all, or when an install from
# the lists we have fails (stale lists point at versions the mirror no longer has).
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt-get update
    apt_install
elif ! apt_install; then
    echo "setup: install failed with the current package lists; running apt-get update" >&2
    apt-get update
    apt_install
fi

# Installed here for the tests only: the package enables its service at boot, which would
# leave a Redis listening on port 6379 after the next reboot. Only a service this run
# installed is disabled; one that was there before is the machine owner's.
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
    command -v systemctl >/dev/null && { systemctl disable redis-server >/dev/null 2>&1 || true; }
    command -v update-rc.d >/dev/null && { update-rc.d redis-server disable >/dev/null 2>&1 || true; }
    echo "setup: redis-server's system service is disabled at boot (the tests start their own)"
fi

# If the service was started anyway (a policy-rc.d that allows it), it is still not
# ours to stop: the tests never use port 6379, so it does no harm. Just say so.
if command -v pgrep >/dev/null && pgrep -x redis-server >/dev/null &&
    pgrep -af 'redis-server .*:6379' >/dev/null; then
    echo "setup: note: a system redis-server is running on port 6379; redlock's tests do not use it"
fi
echo "setup: done"
