"""Shared by the release tests (CTest label `release`, packaging/tests.cmake): the artifacts
scripts/release.sh built for the `release: build` fixture, Debian roots made with
debootstrap (cached), and running a program chrooted into one."""

import fcntl
import glob
import os
import shutil
import subprocess
import sys

import support

DIST = os.environ.get("REDLOCK_RELEASE_DIST",
                      os.path.join(support.BUILD_DIR, "release-test", "dist"))
# Sysroots (scripts/release.sh) and Debian roots (debian_root), kept between runs.
CACHE = os.environ.get("REDLOCK_RELEASE_CACHE",
                       os.path.join(support.BUILD_DIR, "release-cache"))
RELEASE_SH = os.path.join(support.SOURCE_DIR, "scripts", "release.sh")
CHECK_BINARY = os.path.join(support.SOURCE_DIR, "packaging", "release", "check_binary.cmake")
MIRROR = os.environ.get("REDLOCK_DEBIAN_MIRROR", "http://deb.debian.org/debian")
ARCHES = {"x86_64": ("amd64", "x86-64"), "aarch64": ("arm64", "ARM aarch64")}

# The e2e harness: redis-servers on loopback, free ports.
sys.path.insert(0, os.path.join(support.SOURCE_DIR, "tests", "e2e"))


project_version = support.project_version


def artifacts():
    """{file name: path} of what the fixture's release.sh left in DIST."""
    return {os.path.basename(p): p for p in sorted(glob.glob(os.path.join(DIST, "*")))}


def require_dist(test):
    if not os.path.exists(os.path.join(DIST, "SHA256SUMS")):
        test.fail(f"{DIST}/SHA256SUMS missing: the fixture `release: build` "
                  f"(scripts/release.sh --dist {DIST}) did not run or failed")


def tarball(arch):
    return os.path.join(DIST, f"redlock-{project_version()}-linux-{arch}.tar.gz")


def require_root(test, why):
    if os.geteuid() != 0:
        test.skipTest(f"needs root for {why}; run the release tests as root (CI does)")


# The Debian roots the x86_64 binary is run in: suite -> packages beyond minbase. Debian
# 11: glibc 2.31, OpenSSL 1.1.1, Redis 6.0; Debian 13: glibc 2.41, OpenSSL 3, Redis 8,
# Valkey 8. Their servers are the ones the e2e tests run against besides the host's
# (servers.py).
ROOTS = {"bullseye": ["libssl1.1", "redis-server"],
         "trixie": ["libssl3t64", "redis-server", "valkey-server"]}


def unmount_below(root):
    """Unmounts what is mounted at or below `root` (deepest first): debootstrap can leave
    the root's /proc or /sys mounted when it is stopped or fails, and a later rmtree of
    the root must not walk into them."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    for point in sorted((p for p in points if (p + "/").startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def debian_root(test, suite, include=()):
    """A Debian `suite` root for amd64 made by `debootstrap --variant=minbase` with the
    packages `include`, cached in CACHE/roots (a second run reuses it). Skips when not
    root; fails (does not skip) when debootstrap or the archive fails."""
    require_root(test, "debootstrap and chroot")
    support.require_tool(test, "debootstrap")
    roots = os.path.join(CACHE, "roots")
    os.makedirs(roots, exist_ok=True)
    root = os.path.join(roots, suite)
    stamp = f"{suite} minbase {' '.join(sorted(include))}\n"
    with open(os.path.join(roots, f".{suite}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two tests may ask for the same root at once
        done = os.path.join(root, ".redlock-complete")
        if os.path.exists(done) and open(done).read() == stamp:
            return root
        if os.path.exists(root):
            unmount_below(root)
            shutil.rmtree(root)
        command = ["debootstrap", "--variant=minbase"]
        if include:
            command.append("--include=" + ",".join(include))
        result = support.run(command + [suite, root, MIRROR], timeout=1200, check=False)
        unmount_below(root)
        if result.returncode != 0:
            log = os.path.join(root, "debootstrap", "debootstrap.log")
            tail = open(log).read()[-3000:] if os.path.exists(log) else ""
            test.fail(f"debootstrap {suite} failed ({result.returncode}):\n"
                      f"{result.stdout[-3000:]}{result.stderr[-3000:]}\n{tail}")
        with open(done, "w") as f:
            f.write(stamp)
    return root


def chroot_run(root, args, timeout=60, env=None):
    """Runs `args` chrooted into `root`, in a mount namespace of its own with /proc
    mounted (gone when it exits). The network is the host's: servers on the host's
    loopback answer."""
    script = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
    clean = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C"}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           root, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(clean, **(env or {})))


def unpack_binary(tarball_path, into):
    """The redlock binary of a release tarball, unpacked under `into`."""
    os.makedirs(into, exist_ok=True)
    support.run(["tar", "-xzf", tarball_path, "-C", into], timeout=60)
    (binary,) = glob.glob(os.path.join(into, "redlock-*", "bin", "redlock"))
    return binary
