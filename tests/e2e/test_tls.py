"""rediss://: TLS against a real
redis-server with a TLS port, certificates made for the test with openssl(1)."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from redlock_e2e import SLACK, E2ETest, free_port, wait_until

CERTS = None  # made once for the module: a CA, a server and a client certificate


def make_certs():
    d = tempfile.mkdtemp(prefix="redlock-e2e-tls-")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=redlock test {ca}")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name, ca in (("server", "ca"), ("client", "ca"), ("stranger", "other-ca")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}")
        ext = "server.ext" if name == "server" else "client.ext"
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", ext)
    return d


def setUpModule():
    global CERTS
    if not shutil.which("openssl"):
        raise unittest.SkipTest("openssl is not installed (scripts/setup.sh installs it)")
    CERTS = make_certs()


def tearDownModule():
    if CERTS:
        shutil.rmtree(CERTS, True)


class TlsTest(E2ETest):
    def cert(self, name):
        return os.path.join(CERTS, name)

    def tls_server(self, auth_clients="no"):
        """A server with a plain port (for the test's own checks) and a TLS port."""
        tls_port = free_port()
        server = self.redis_server(extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", self.cert("server.pem"),
            "--tls-key-file", self.cert("server.key"), "--tls-ca-cert-file",
            self.cert("ca.pem"), "--tls-auth-clients", auth_clients))
        server.tls_port = tls_port
        return server

    def config(self, text):
        return self.write_file(f"config-{time.monotonic_ns()}.toml", text)

    def trusting(self, extra=""):
        return self.config(f'tls_ca_file = "{self.cert("ca.pem")}"\n{extra}')

    def run_tls(self, config, server, *run_args, host="127.0.0.1", port=None):
        url = f"rediss://{host}:{port or server.tls_port}"
        return self.run_redlock(["-c", config, "-s", url, *run_args])

    def test_a_run_over_tls_holds_the_lock_and_releases_it(self):
        server = self.tls_server()
        r = self.run_tls(self.trusting(), server, "run", "-k", "t", "--", "sh", "-c",
                         'redis-cli -p "$1" GET lock:t', "sh", str(server.port))
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")
        self.assertKeyGone(server, "lock:t")
        # By name as well as by address: the certificate has both.
        r = self.run_tls(self.trusting(), server, "run", "-k", "t", "--", "true",
                         host="localhost")
        self.assertStatus(r, 0)

    def test_inspection_and_waiting_work_over_tls(self):
        server = self.tls_server()
        config = self.trusting()
        url = f"rediss://127.0.0.1:{server.tls_port}"
        holder = self.holder(["-k", "t"], global_args=["-c", config, "-s", url]).wait_ready()
        r = self.run_redlock(["-c", config, "-s", url, "status", "t"])
        self.assertStatus(r, 0)
        self.assertIn("t: held by", r.stdout)
        listed = self.run_redlock(["-c", config, "-s", url, "list"])
        self.assertStatus(listed, 0)
        self.assertRegex(listed.stdout, r"\nt +\S+ +\S+@")
        # Woken by the release over TLS too: subscribed, so it attempts twice (once, and
        # when woken; once subscribed it only checks it is still on the wait list), not
        # every 20-200 ms as a waiter that cannot subscribe does.
        waiter = self.start_redlock(["-c", config, "-s", url, "-v", "run", "-k", "t", "-w",
                                     "20s", "--", "true"])
        # The progress line comes once subscribed: from then on only a notice (or the
        # holder's 30 s lease) brings another attempt.
        wait_until(lambda: "waiting for 't'" in waiter.stderr, 15, proc=waiter,
                   message="the waiter to be waiting")
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        self.assertNotIn("cannot subscribe", waiter.stderr)
        self.assertRegex(waiter.stderr, r"acquired 't' in \S+ after 2 attempts")
        r = self.run_redlock(["-c", config, "-s", url, "doctor"])
        self.assertIn("TLS, certificate verified for '127.0.0.1'", r.stdout)

    def test_an_untrusted_certificate_is_refused_with_69(self):
        server = self.tls_server()
        for config in (self.config(""),  # the system store does not know the test CA
                       self.config(f'tls_ca_file = "{self.cert("other-ca.pem")}"\n')):
            r = self.run_tls(config, server, "run", "-k", "t", "--", "touch", self.path("ran"))
            self.assertStatus(r, 69)
            self.assertIn("certificate verify failed", r.stderr)
            self.assertMessages(r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))

    def test_a_name_mismatch_is_refused_and_tls_server_name_fixes_it(self):
        server = self.tls_server()
        bad = self.trusting('tls_server_name = "db.example.com"\n')
        r = self.run_tls(bad, server, "run", "-k", "t", "--", "true")
        self.assertStatus(r, 69)
        self.assertIn("the certificate is not for 'db.example.com'", r.stderr)
        # Reached by an address the certificate does not name, checked against one it does.
        good = self.trusting('tls_server_name = "localhost"\n')
        self.assertStatus(self.run_tls(good, server, "run", "-k", "t", "--", "true"), 0)

    def test_tls_verify_false_connects_and_says_so(self):
        server = self.tls_server()
        config = self.config("tls_verify = false\n")
        r = self.run_tls(config, server, "-v", "run", "-k", "t", "--", "true")
        self.assertStatus(r, 0)
        self.assertIn("tls_verify is false: the server's certificate is not checked", r.stderr)
        r = self.run_tls(config, server, "doctor")
        self.assertIn("TLS without verification (tls_verify = false)", r.stdout)

    def test_a_client_certificate_when_the_server_asks_for_one(self):
        server = self.tls_server(auth_clients="yes")
        r = self.run_tls(self.trusting(), server, "run", "-k", "t", "--", "true")
        self.assertStatus(r, 69)
        self.assertIn("client certificate", r.stderr)
        stranger = self.trusting(f'tls_cert_file = "{self.cert("stranger.pem")}"\n'
                                 f'tls_key_file = "{self.cert("stranger.key")}"\n')
        r = self.run_tls(stranger, server, "run", "-k", "t", "--", "true")
        self.assertStatus(r, 69)
        self.assertIn("client certificate", r.stderr)
        client = self.trusting(f'tls_cert_file = "{self.cert("client.pem")}"\n'
                               f'tls_key_file = "{self.cert("client.key")}"\n')
        self.assertStatus(self.run_tls(client, server, "run", "-k", "t", "--", "true"), 0)

    def test_the_wrong_scheme_for_the_port_is_named(self):
        server = self.tls_server()
        # rediss:// to the plain port: the server waits for more of the "command".
        config = self.trusting('command_timeout = "300ms"\nconnect_timeout = "300ms"\n')
        r = self.run_tls(config, server, "run", "-k", "t", "--", "true", port=server.port)
        self.assertStatus(r, 69)
        self.assertIn("(a plain redis:// port?)", r.stderr)
        # redis:// to the TLS port: it drops the connection.
        r = self.run_redlock(["-s", f"redis://127.0.0.1:{server.tls_port}", "run", "-k", "t",
                              "--", "true"])
        self.assertStatus(r, 69)
        self.assertIn("(a TLS port? use rediss://)", r.stderr)

    def test_redlock_over_tls_with_a_frozen_server_costs_nothing(self):
        servers = [self.tls_server() for _ in range(3)]
        servers[2].freeze()
        self.addCleanup(servers[2].thaw)
        config = self.trusting('connect_timeout = "5s"\ncommand_timeout = "5s"\n')
        args = ["-c", config]
        for s in servers:
            args += ["-s", f"rediss://127.0.0.1:{s.tls_port}"]
        started = time.monotonic()
        r = self.run_redlock([*args, "run", "-k", "t", "--", "true"])
        self.assertStatus(r, 0)
        self.assertLess(time.monotonic() - started, 4 * SLACK)  # not the 5 s timeout

    def test_bad_tls_files_are_config_errors(self):
        server = self.tls_server()
        config = self.config('tls_ca_file = "/nonexistent/ca.pem"\n')
        r = self.run_tls(config, server, "run", "-k", "t", "--", "true")
        self.assertStatus(r, 78)
        self.assertIn("tls_ca_file", r.stderr)

    def test_version_says_tls_is_built_in(self):
        r = self.run_redlock(["--version"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"TLS: OpenSSL 3\.")


if __name__ == "__main__":
    unittest.main()
