"""The servers users run, for the e2e tests (CTest label `servers`, the servers stage of
scripts/test.sh): Redis 6.0 (Debian 11's redis-server, the oldest supported), Redis 8 and
Valkey 8 (Debian 13's redis-server and valkey-server), beside the host's Redis 7.0.

They come from the Debian roots the release tests make (release.debian_root: debootstrap,
cached in build/release-cache/roots; release.ROOTS names the packages). Each runs through
its root's own dynamic loader and libraries, not chrooted, so that it listens on the host's
loopback and keeps its files in the host's temp dirs: a wrapper script per server in
BUILD_DIR/servers/NAME/redis-server, which the tests take as REDIS_SERVER.

    python3 runtests.py servers            makes the roots and wrappers (the fixture
                                           `servers: roots`; as root, else skipped)
    python3 servers.py run NAME CMD...     CMD with REDIS_SERVER=NAME's wrapper; status 77
                                           (skipped) when the fixture made none
"""

import os
import platform
import subprocess
import sys
import unittest

import release
import support

# name -> (Debian suite, program in its /usr/bin, what `--version` says).
SERVERS = {
    "redis-6.0": ("bullseye", "redis-server", "Redis server v=6.0."),
    "redis-8": ("trixie", "redis-server", "Redis server v=8."),
    "valkey-8": ("trixie", "valkey-server", "Valkey server v=8."),
}
WRAPPERS = os.path.join(support.BUILD_DIR, "servers")


def wrapper(name):
    return os.path.join(WRAPPERS, name, "redis-server")


def write_wrapper(name, root):
    """A script that runs the root's server with the root's loader and libraries."""
    suite, program, _ = SERVERS[name]
    libs = f"{root}/lib/x86_64-linux-gnu:{root}/usr/lib/x86_64-linux-gnu"
    path = wrapper(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(f"#!/bin/sh\n# {program} of Debian {suite} ({root}), made by "
                f"tests/packaging/servers.py\n"
                f"exec '{root}/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2' "
                f"--library-path '{libs}' '{root}/usr/bin/{program}' \"$@\"\n")
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)


class Servers(unittest.TestCase):
    def test_each_server_runs_from_its_root(self):
        if platform.machine() != "x86_64":
            self.skipTest(f"the Debian roots are amd64; this is {platform.machine()}")
        roots = {}
        for name, (suite, _, _) in SERVERS.items():
            if suite not in roots:
                roots[suite] = release.debian_root(self, suite, release.ROOTS[suite])
            write_wrapper(name, roots[suite])
        for name, (_, _, expected) in SERVERS.items():
            with self.subTest(name):
                r = support.run([wrapper(name), "--version"], timeout=30, check=False)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.startswith(expected), r.stdout)


def run(name, command):
    path = wrapper(name)
    if not os.access(path, os.X_OK):
        print(f"servers.py: no {path}: the fixture `servers: roots` did not make it "
              f"(it needs root and debootstrap)", file=sys.stderr)
        return 77
    return subprocess.run(command, env=dict(os.environ, REDIS_SERVER=path)).returncode


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "run" or sys.argv[2] not in SERVERS:
        sys.exit(f"usage: servers.py run {{{','.join(SERVERS)}}} COMMAND [ARG...]")
    sys.exit(run(sys.argv[2], sys.argv[3:]))
