"""The release binaries run where the issue says they do: the x86_64 tarball's binary in a
Debian 11 root (glibc 2.31, OpenSSL 1.1.1) and a Debian 13 root (glibc 2.41, OpenSSL 3),
both made with debootstrap and entered with chroot, against redis-servers on the host's
loopback, over TCP and TLS (`run`, `status --json`, `history`, and the error paths that
throw and catch C++ exceptions inside the binary); the aarch64 binary under
qemu-aarch64-static on Debian 11's arm64 C library (the release sysroot): the same error
paths, `run` (its watchdog a grandchild there) and the lock commands."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import release
import support
from redlock_e2e import RedisServer, free_port

CERTS = None


def setUpModule():
    global CERTS
    if not shutil.which("openssl"):
        raise unittest.SkipTest("openssl is not installed (scripts/setup.sh installs it)")
    CERTS = tempfile.mkdtemp(prefix="redlock-release-certs-")

    def openssl(*args):
        support.run(["openssl", *args], cwd=CERTS, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=redlock release test ca")
    with open(os.path.join(CERTS, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=server")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")


def tearDownModule():
    if CERTS:
        shutil.rmtree(CERTS, True)


class Portability(unittest.TestCase):
    def setUp(self):
        release.require_dist(self)
        self.plain = RedisServer()
        self.addCleanup(self.plain.stop)
        tls_port = free_port()
        self.tls = RedisServer(extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", os.path.join(CERTS, "server.pem"),
            "--tls-key-file", os.path.join(CERTS, "server.key"),
            "--tls-ca-cert-file", os.path.join(CERTS, "ca.pem"), "--tls-auth-clients", "no"))
        self.tls.tls_port = tls_port
        self.addCleanup(self.tls.stop)

    def urls(self):
        return {"tcp": f"redis://127.0.0.1:{self.plain.port}",
                "tls": f"rediss://127.0.0.1:{self.tls.tls_port}"}

    def check_runs(self, redlock, config, openssl_version):
        """The checks every target passes; `redlock(args)` runs the binary there and
        returns the CompletedProcess, `config` is the config's path as the binary sees it."""
        r = redlock(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, rf"^redlock {release.project_version()} \(hiredis 0\.14\.1, "
                                   rf"TLS: {openssl_version}")
        # Error paths that throw inside the binary (CLI11, toml++) and catch in their
        # adapters: a broken unwinder would abort (134) instead.
        r = redlock(["--no-such-option"])
        self.assertEqual((r.returncode, r.stderr), (64, "redlock: unexpected argument "
                                                        "'--no-such-option'\n"))
        r = redlock(["-c", config + ".broken", "status", "x"])
        self.assertEqual(r.returncode, 78, r.stderr)
        self.assertIn("error while parsing", r.stderr)
        for kind, url in self.urls().items():
            with self.subTest(kind):
                name = f"portable-{kind}"
                r = redlock(["-c", config, "-s", url, "run", "-k", name, "--", "sh", "-c",
                             "exit 7"])
                self.assertEqual(r.returncode, 7, r.stderr)
                r = redlock(["-c", config, "-s", url, "run", "-k", name, "--", "true"])
                self.assertEqual((r.returncode, r.stderr), (0, ""))
                r = redlock(["-c", config, "-s", url, "status", name, "--json"])
                self.assertEqual(r.returncode, 0, r.stderr)
                (lock,) = json.loads(r.stdout)["locks"]
                self.assertEqual((lock["name"], lock["state"]), (name, "free"))
                self.assertEqual(lock["latest_run"]["outcome"], "ran")
                r = redlock(["-c", config, "-s", url, "history", name])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertRegex(r.stdout, r"ran, exit 0: true\n")
                self.assertRegex(r.stdout, r"ran, exit 7: sh")
        # The runs were on the host's servers, and each released its lock there.
        for server, name in ((self.plain, "portable-tcp"), (self.tls, "portable-tls")):
            self.assertEqual(server.command("EXISTS", f"lock:{name}"), 0)

    def check_debian(self, suite, openssl_version):
        root = release.debian_root(self, suite, release.ROOTS[suite])
        scratch = tempfile.mkdtemp(prefix="redlock-release-", dir=os.path.join(root, "tmp"))
        self.addCleanup(shutil.rmtree, scratch, True)
        binary = release.unpack_binary(release.tarball("x86_64"), scratch)
        inside = lambda path: "/" + os.path.relpath(path, root)  # noqa: E731
        shutil.copy(os.path.join(CERTS, "ca.pem"), scratch)
        config = os.path.join(scratch, "config.toml")
        with open(config, "w") as f:
            f.write(f'tls_ca_file = "{inside(os.path.join(scratch, "ca.pem"))}"\n')
        with open(config + ".broken", "w") as f:
            f.write("servers = [\n")

        def redlock(args):
            return release.chroot_run(root, [inside(binary), *args], timeout=60)

        # The root is what it says: its own glibc and OpenSSL.
        r = release.chroot_run(root, ["ldd", "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_runs(redlock, inside(config), openssl_version)
        return r.stdout.splitlines()[0]

    def test_x86_64_tarball_runs_on_debian_11_with_openssl_1_1(self):
        ldd = self.check_debian("bullseye", r"OpenSSL 1\.1\.1")
        self.assertIn("2.31", ldd)

    def test_x86_64_tarball_runs_on_debian_13_with_openssl_3(self):
        ldd = self.check_debian("trixie", r"OpenSSL 3\.")
        self.assertRegex(ldd, r"2\.(4[0-9])")

    def test_aarch64_tarball_runs_under_qemu_on_debian_11s_c_library(self):
        qemu = support.require_tool(self, "qemu-aarch64-static")
        sysroot = os.path.join(release.CACHE, "sysroot-aarch64")
        self.assertTrue(os.path.exists(os.path.join(sysroot, "lib", "ld-linux-aarch64.so.1")),
                        f"{sysroot}: the arm64 sysroot scripts/release.sh made")
        scratch = tempfile.mkdtemp(prefix="redlock-release-aarch64-")
        self.addCleanup(shutil.rmtree, scratch, True)
        binary = release.unpack_binary(release.tarball("aarch64"), scratch)
        out = support.run(["file", "-b", binary], check=False).stdout if shutil.which("file") \
            else ""
        if out:
            self.assertIn("ARM aarch64", out)
        config = os.path.join(scratch, "config.toml")
        with open(config, "w") as f:
            f.write("")
        with open(config + ".broken", "w") as f:
            f.write("servers = [\n")
        marker = os.path.join(scratch, "ran")

        def redlock(args):
            # PROGRAM (an x86_64 sh or true) runs natively: qemu-user hands execve to the
            # kernel. No TLS here: the sysroot has no libssl.
            return subprocess.run([qemu, "-L", sysroot, binary, *args], capture_output=True,
                                  text=True, timeout=120)

        r = redlock(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, rf"^redlock {release.project_version()} \(hiredis 0\.14\.1, "
                                   r"TLS: built in, but TLS needs OpenSSL 3 or 1\.1")
        r = redlock(["--no-such-option"])
        self.assertEqual(r.returncode, 64, r.stderr)
        r = redlock(["-c", config + ".broken", "status", "x"])
        self.assertEqual(r.returncode, 78, r.stderr)
        url = f"redis://127.0.0.1:{self.plain.port}"
        # qemu-user refuses a clone() whose exit signal is not SIGCHLD (linux-user's
        # do_fork), which the watchdog is: there it starts as a grandchild instead.
        r = redlock(["-c", config, "-s", url, "run", "-k", "arm", "--", "touch", marker])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(os.path.exists(marker))
        r = redlock(["-c", config, "-s", url, "acquire", "arm", "-t", "60s"])
        self.assertEqual(r.returncode, 0, r.stderr)
        token = r.stdout.strip()
        self.assertRegex(token, r"^[0-9a-f]{32}$")
        r = redlock(["-c", config, "-s", url, "status", "arm", "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        lock = json.loads(r.stdout)["locks"][0]
        self.assertEqual(lock["state"], "held")
        self.assertEqual(self.plain.command("GET", "lock:arm"), token)
        r = redlock(["-c", config, "-s", url, "release", "arm", "--token", token])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.plain.command("EXISTS", "lock:arm"), 0)

if __name__ == "__main__":
    unittest.main()
