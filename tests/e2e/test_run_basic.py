"""`redlock run` as a plain wrapper: status, I/O, environment, key handling, URLs."""

import os
import re
import stat
import subprocess
import unittest

from redlock_e2e import REDLOCK_BIN, SLACK, E2ETest, wait_until


class RunBasicTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def run_lock(self, name, program, *run_args, **kw):
        return self.run_redlock(["-s", self.url, "run", "-k", name, *run_args, "--", *program],
                                **kw)

    # -- exit status

    def test_program_exit_status_passes_through(self):
        for code in (0, 3, 42, 255):
            with self.subTest(code=code):
                r = self.run_lock("status", ["sh", "-c", f"exit {code}"])
                self.assertStatus(r, code)
                self.assertKeyGone(self.server, "lock:status")

    def test_program_killed_by_a_signal_gives_128_plus_the_signal(self):
        for sig, expected in (("TERM", 143), ("KILL", 137), ("INT", 130)):
            with self.subTest(signal=sig):
                r = self.run_lock("sig", ["sh", "-c", f"kill -{sig} $$"])
                self.assertStatus(r, expected)
                self.assertKeyGone(self.server, "lock:sig")

    def test_a_successful_run_prints_nothing_of_its_own(self):
        r = self.run_lock("quiet", ["true"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "")

    # -- I/O and arguments

    def test_stdin_and_stdout_pass_through(self):
        data = "hello\nworld with spaces\n" + "x" * 100000 + "\n"
        r = self.run_lock("io", ["cat"], input=data.encode())
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, data)

    def test_stderr_passes_through(self):
        r = self.run_lock("err", ["sh", "-c", "echo to-stderr >&2; echo to-stdout"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "to-stdout\n")
        self.assertEqual(r.stderr, "to-stderr\n")

    def test_closed_standard_descriptors_are_filled_with_dev_null(self):
        # With stdout and stderr closed, the first socket redlock opened used to become
        # fd 2, and its -v messages went to the Redis server as commands.
        seen = self.path("fds")
        # The words are expanded before the redirection, so they see PROGRAM's own fds.
        program = ["sh", "-c", 'printf "%s\\n" "$(readlink /proc/$$/fd/0)" '
                   '"$(readlink /proc/$$/fd/1)" "$(readlink /proc/$$/fd/2)" > "$1"', "sh", seen]
        shell = ["sh", "-c", 'exec "$0" "$@" <&- >&- 2>&-', REDLOCK_BIN]
        cp = subprocess.run(shell + ["-v", "-s", self.url, "run", "-k", "closed", "--", *program],
                            env=self.env(), cwd=self.tmp, timeout=30 * SLACK)
        self.assertEqual(cp.returncode, 0)
        with open(seen) as f:
            self.assertEqual(f.read(), "/dev/null\n" * 3)
        self.assertKeyGone(self.server, "lock:closed")
        errors = [line for line in self.server.command("INFO", "errorstats").splitlines()
                  if line.startswith("errorstat_")]
        self.assertEqual(errors, [], "redlock wrote something else than commands to the server")

    def test_program_is_run_without_a_shell_and_found_on_path(self):
        args = ["a b", "$HOME", "*", ";", "`id`", "'q'", '"dq"', "-n", "--", "-k"]
        r = self.run_lock("noshell", ["printf", r"%s\n", *args])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "".join(a + "\n" for a in args))

    def test_program_options_after_the_double_dash_are_untouched(self):
        r = self.run_lock("opts", ["sh", "-c", 'printf "%s|" "$@"', "sh", "-w", "5", "-n", "-q"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "-w|5|-n|-q|")

    def test_global_options_are_accepted_after_the_command(self):
        r = self.run_redlock(["run", "-s", self.url, "-k", "after", "--", "sh", "-c", "exit 4"])
        self.assertStatus(r, 4)

    def test_missing_program_exits_127(self):
        for program in ("/nonexistent/dir/prog", "redlock-no-such-program-xyz"):
            with self.subTest(program=program):
                r = self.run_lock("missing", [program])
                self.assertStatus(r, 127)
                self.assertMessages(r.stderr)
                self.assertKeyGone(self.server, "lock:missing")

    def test_non_executable_program_exits_126(self):
        path = self.write_file("not-executable", "#!/bin/sh\nexit 0\n", mode=0o644)
        r = self.run_lock("noexec", [path])
        self.assertStatus(r, 126)
        self.assertMessages(r.stderr)
        self.assertKeyGone(self.server, "lock:noexec")

    # -- what PROGRAM sees and what Redis holds

    def test_environment_has_key_and_token_equal_to_the_redis_value(self):
        h = self.holder(["-k", "env"], global_args=["-s", self.url]).wait_ready()
        token = h.token
        self.assertRegex(token, r"^[0-9a-f]{32}$")
        # The contract names the variable but not whether it holds NAME or the Redis key.
        self.assertIn(h.key, ("env", "lock:env"))
        self.assertEqual(self.server.command("GET", "lock:env"), token)
        self.assertEqual(h.release(), 0)
        self.assertKeyGone(self.server, "lock:env")

    def test_each_run_gets_a_fresh_token(self):
        tokens = set()
        for _ in range(3):
            r = self.run_lock("fresh", ["sh", "-c", 'printf %s "$REDLOCK_TOKEN"'])
            self.assertStatus(r, 0)
            self.assertRegex(r.stdout, r"^[0-9a-f]{32}$")
            tokens.add(r.stdout)
        self.assertEqual(len(tokens), 3)

    def test_lock_key_is_released_after_the_run(self):
        for code in (0, 1):
            with self.subTest(code=code):
                r = self.run_lock("released", ["sh", "-c", f"exit {code}"])
                self.assertStatus(r, code)
                self.assertKeyGone(self.server, "lock:released")
        # and can be taken again at once
        self.assertStatus(self.run_lock("released", ["true"], ), 0)
        self.assertStatus(self.run_lock("released", ["true"], "-n"), 0)

    def test_lease_has_the_requested_ttl(self):
        # (ttl flag, lower bound ms exclusive, upper bound ms inclusive)
        cases = [
            (None, 0, 30000),          # default 30s
            ("5m", 30000, 300000),
            ("2h", 300000, 7200000),
            ("90", 30000, 90000),       # bare seconds
            ("45.5", 30000, 45500),    # fractions allowed
            ("40000ms", 30000, 40000),
        ]
        for ttl, low, high in cases:
            with self.subTest(ttl=ttl):
                args = ["-k", "ttl"] + (["-t", ttl] if ttl else [])
                h = self.holder(args, global_args=["-s", self.url]).wait_ready()
                pttl = self.server.command("PTTL", "lock:ttl")
                self.assertGreater(pttl, low)
                self.assertLessEqual(pttl, high)
                self.assertEqual(h.release(), 0)

    # -- config and URLs

    def test_key_prefix_from_a_config_file(self):
        config = self.write_file("conf/config.toml",
                                 'key_prefix = "app:"\n\n[[servers]]\n'
                                 f'url = "{self.url}"\n')
        h = self.holder(["-k", "pref"], global_args=["-c", config]).wait_ready()
        self.assertEqual(self.server.command("GET", "app:pref"), h.token)
        self.assertIsNone(self.server.command("GET", "lock:pref"))
        self.assertEqual(h.release(), 0)
        self.assertKeyGone(self.server, "app:pref")

    def test_url_with_a_database_number_uses_that_database(self):
        url = self.server.url(db=3)
        h = self.holder(["-k", "db"], global_args=["-s", url]).wait_ready()
        self.assertEqual(self.server.command("GET", "lock:db", db=3), h.token)
        self.assertIsNone(self.server.command("GET", "lock:db", db=0))
        self.assertEqual(h.release(), 0)
        self.assertKeyGone(self.server, "lock:db", db=3)

    def test_unix_socket_url(self):
        server = self.redis_server(unix_socket=True)
        for db in (None, 2):
            with self.subTest(db=db):
                url = server.url(db=db)
                self.assertTrue(url.startswith("unix:///"))
                h = self.holder(["-k", "sock"], global_args=["-s", url]).wait_ready()
                self.assertEqual(server.command("GET", "lock:sock", db=db or 0), h.token)
                self.assertEqual(h.release(), 0)
                self.assertKeyGone(server, "lock:sock", db=db or 0)

    def test_lock_names_with_every_allowed_character(self):
        name = "AZaz09._:/@+-" + "n" * (200 - 13)
        self.assertEqual(len(name), 200)
        r = self.run_lock(name, ["sh", "-c", 'printf %s "$REDLOCK_TOKEN"'])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}$")
        self.assertKeyGone(self.server, "lock:" + name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
