"""Failures a user meets: unreachable servers, authentication, usage and config errors,
message format, and passwords kept out of messages and the process list."""

import os
import re
import unittest

from redlock_e2e import LOCK_ACL_RULES, SLACK, E2ETest, free_port, read_pid_file, wait_until

FILE_LINE_COL = re.compile(r":\d+:\d+: ")


class ErrorsTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.marker = self.path("ran")

    def run_lock(self, global_args, *run_args, timeout=30.0, env=None):
        """`redlock GLOBAL run RUN_ARGS -- touch MARKER`; returns (result, program ran)."""
        r = self.run_redlock([*global_args, "run", *run_args, "--", "touch", self.marker],
                             timeout=timeout, env=env)
        return r, os.path.exists(self.marker)

    def assertFailure(self, result, ran, status):
        self.assertStatus(result, status)
        self.assertFalse(ran, "PROGRAM ran although redlock failed")
        self.assertEqual(result.stdout, "", "stdout belongs to PROGRAM")
        self.assertMessages(result.stderr)

    # -- servers that cannot be reached

    def test_unreachable_server_exits_69_at_once(self):
        url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
        for wait in ([], ["-w", "30s"], ["-n"]):
            with self.subTest(wait=wait):
                r, ran = self.run_lock(["-s", url], "-k", "x", *wait)
                self.assertFailure(r, ran, 69)
                # Unreachable servers are never waited on.
                self.assertLess(r.elapsed, 5.0 * SLACK, r)

    def test_no_server_answering_is_said_in_words_not_as_0_of_n(self):
        urls = [a for _ in range(3) for a in ("-s", f"redis://127.0.0.1:{free_port()}")]
        r, ran = self.run_lock(urls, "-k", "x")
        self.assertFailure(r, ran, 69)
        self.assertIn("none of the 3 servers answered, 2 needed", r.stderr)
        self.assertNotIn("only 0 of", r.stderr)

    def test_missing_unix_socket_exits_69(self):
        r, ran = self.run_lock(["-s", "unix://" + self.path("no-such.sock")], "-k", "x")
        self.assertFailure(r, ran, 69)

    # -- authentication and permissions

    def test_wrong_password_exits_77_without_showing_it(self):
        server = self.redis_server(requirepass="right-Pw-81")
        password = "wrong-Pw-Zq8x"
        for verbose in ([], ["-v"]):
            with self.subTest(verbose=verbose):
                r, ran = self.run_lock([*verbose, "-s", server.url(password=password)], "-k", "x")
                self.assertFailure(r, ran, 77)
                self.assertNotIn(password, r.stderr)
                self.assertNotIn("right-Pw-81", r.stderr)

    def test_no_password_for_a_server_that_requires_one_exits_77(self):
        server = self.redis_server(requirepass="right-Pw-81")
        r, ran = self.run_lock(["-s", server.url()], "-k", "x")
        self.assertFailure(r, ran, 77)

    def test_right_password_in_the_url_works(self):
        server = self.redis_server(requirepass="right-Pw-81")
        r = self.run_redlock(["-s", server.url(password="right-Pw-81"), "run", "-k", "ok", "--",
                              "sh", "-c", 'printf %s "$REDLOCK_TOKEN"'])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}$")
        self.assertEqual(r.stderr, "")
        self.assertKeyGone(server, "lock:ok")

    def test_acl_user_with_password_in_the_url_works(self):
        server = self.redis_server(acl_user=("locker", "acl-Pw-3", LOCK_ACL_RULES))
        h = self.holder(["-k", "acl"], global_args=["-s", server.url("locker", "acl-Pw-3")])
        h.wait_ready()
        self.assertEqual(server.command("GET", "lock:acl"), h.token)
        self.assertEqual(h.release(), 0)
        self.assertKeyGone(server, "lock:acl")

    def test_acl_user_with_a_wrong_password_exits_77(self):
        server = self.redis_server(acl_user=("locker", "acl-Pw-3", LOCK_ACL_RULES))
        r, ran = self.run_lock(["-s", server.url("locker", "bad-Pw-4")], "-k", "x")
        self.assertFailure(r, ran, 77)
        self.assertNotIn("bad-Pw-4", r.stderr)

    def test_acl_user_without_permission_on_the_key_exits_77(self):
        server = self.redis_server(acl_user=("locker", "acl-Pw-3", "on ~other:* +@all"))
        r, ran = self.run_lock(["-s", server.url("locker", "acl-Pw-3")], "-k", "x")
        self.assertFailure(r, ran, 77)
        self.assertEqual(server.command("EXISTS", "lock:x"), 0)

    def test_a_password_is_masked_in_a_usage_error(self):
        # A typo (--sever) makes CLI11 quote the URL back as an unexpected argument.
        r = self.run_redlock(["--sever", "redis://:typo-Secret-9@127.0.0.1:1", "run", "-k",
                              "x", "--", "true"])
        self.assertStatus(r, 64)
        self.assertNotIn("typo-Secret-9", r.stderr)
        self.assertIn("***", r.stderr)

    def test_password_in_a_server_url_is_masked_in_the_process_list(self):
        server = self.redis_server(requirepass="ps-Secret-77")
        pid_file = self.path("pid")
        h = self.start_redlock(["-s", server.url(password="ps-Secret-77"), "run", "-k", "ps",
                                "--", "sh", "-c",
                                'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100', "sh",
                                pid_file])
        self.kill_at_cleanup(read_pid_file(pid_file, proc=h))
        with open(f"/proc/{h.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        self.assertNotIn(b"ps-Secret-77", cmdline)
        self.assertIn(b"run", cmdline)  # it is redlock's own command line we read
        # The mask is a fixed string that tells nothing of the length: no run of x or *
        # as long as the password, no trailing empty words in its place.
        text = cmdline.rstrip(b"\0").replace(b"\0", b" ")
        self.assertIn(b"redis://:***@127.0.0.1:", text)
        self.assertNotIn(b"*" * 4, text)
        self.assertFalse(text.endswith(b" "), cmdline)
        # also with the user:password@ form and the option glued to its value
        server2 = self.redis_server(acl_user=("locker", "glued-Pw-5", LOCK_ACL_RULES))
        pid_file2 = self.path("pid2")
        h2 = self.start_redlock(["--server=" + server2.url("locker", "glued-Pw-5"), "run",
                                 "-k", "ps", "--", "sh", "-c",
                                 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100', "sh",
                                 pid_file2])
        self.kill_at_cleanup(read_pid_file(pid_file2, proc=h2))
        with open(f"/proc/{h2.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        self.assertNotIn(b"glued-Pw-5", cmdline)
        self.assertIn(b"--server=redis://locker:***@127.0.0.1:", cmdline)

    # -- usage errors

    def assertUsage(self, args, *run_args):
        r, ran = self.run_lock(args, *run_args)
        self.assertFailure(r, ran, 64)
        return r

    def test_bad_durations_are_usage_errors(self):
        url = "redis://127.0.0.1:1"  # never contacted: usage is checked first
        for flag in ("-t", "-w"):
            for value in ("5x", "abc", "ms", "1.2.3", ""):
                with self.subTest(flag=flag, value=value):
                    self.assertUsage(["-s", url], "-k", "x", flag, value)

    def test_missing_key_is_a_usage_error(self):
        self.assertUsage(["-s", "redis://127.0.0.1:1"])

    def test_bad_lock_names_are_usage_errors(self):
        for name in ("a b", "x" * 201, "", "a*b", "caf\u00e9", "a\nb", "{x}"):
            with self.subTest(name=name):
                self.assertUsage(["-s", "redis://127.0.0.1:1"], "-k", name)

    def test_conflict_exit_code_out_of_range_is_a_usage_error(self):
        for code in ("300", "256", "-1", "abc"):
            with self.subTest(code=code):
                self.assertUsage(["-s", "redis://127.0.0.1:1"], "-k", "x", "-E", code)

    def test_unknown_option_is_a_usage_error(self):
        self.assertUsage(["-s", "redis://127.0.0.1:1"], "-k", "x", "--no-such-option")

    def test_run_without_a_program_is_a_usage_error(self):
        r = self.run_redlock(["-s", "redis://127.0.0.1:1", "run", "-k", "x"])
        self.assertStatus(r, 64)
        self.assertMessages(r.stderr)

    def test_no_command_is_a_usage_error(self):
        r = self.run_redlock(["-s", "redis://127.0.0.1:1"])
        self.assertStatus(r, 64)

    def test_an_option_value_that_looks_like_an_option_is_a_usage_error(self):
        # CLI11 takes the next word whatever it is: these used to lock "--" and "-t".
        server = self.redis_server()
        for run_args, named in ((["-k"], "-k"), (["-k", "-t", "5s"], "-k"),
                                (["--key", "--ttl", "5s"], "--key"),
                                (["-k", "x", "-t", "-w", "5s"], "-t")):
            with self.subTest(run_args=run_args):
                r = self.assertUsage(["-s", server.url()], *run_args)
                self.assertIn(f"redlock: {named} needs a value", r.stderr)
                self.assertEqual(server.command("KEYS", "*"), [])
        # Attached, a value may start with a dash.
        r, ran = self.run_lock(["-s", server.url()], "--key=-x")
        self.assertStatus(r, 0)
        self.assertTrue(ran)

    def test_an_empty_config_file_name_is_a_usage_error(self):
        r = self.assertUsage(["-c", "", "-s", "redis://127.0.0.1:1"], "-k", "x")
        self.assertIn("--config", r.stderr)

    def test_one_server_written_two_ways_is_refused(self):
        sock = self.path("r.sock")
        os.makedirs(self.path("sub"))
        os.symlink(self.tmp, self.path("link"))
        for a, b in (("redis://[::1]:7395", "redis://[0:0:0:0:0:0:0:1]:7395"),
                     ("redis://localhost:7395", "redis://127.0.0.1:7395/2"),
                     (f"unix://{self.tmp}/sub/../r.sock", f"unix://{sock}"),
                     (f"unix://{self.tmp}/link/r.sock", f"unix://{sock}")):
            with self.subTest(a=a, b=b):
                r = self.assertUsage(["-s", a, "-s", b], "-k", "x")
                self.assertIn("is listed more than once (first as ", r.stderr)
                self.assertIn("Redlock needs independent servers", r.stderr)
                config = self.config(f'[[servers]]\nurl = "{a}"\n[[servers]]\nurl = "{b}"\n')
                r, ran = self.run_lock(["-c", config], "-k", "x")
                self.assertFailure(r, ran, 78)
                # The second listing's line:col, and where the first one is.
                self.assertIn(f"{config}:4:7: server ", r.stderr)
                self.assertIn("(first at 2:7, as ", r.stderr)

    def test_config_mistakes_get_hints_not_parser_jargon(self):
        config = self.config('[[servers]]\nurl = "redis://127.0.0.1:1"\nttll = 3\n')
        r, _ = self.run_lock(["-c", config], "-k", "x")
        self.assertStatus(r, 78)
        self.assertIn(f"{config}:3:1: unknown key 'ttll' (did you mean 'ttl'? it is a "
                      "top-level key", r.stderr)
        config = self.config('[[servers]]\nurl = "redis://127.0.0.1:1\n')
        r, _ = self.run_lock(["-c", config], "-k", "x")
        self.assertStatus(r, 78)
        self.assertIn(f"{config}:2:", r.stderr)
        self.assertIn("unterminated string: the closing quote is missing", r.stderr)

    def test_bad_server_urls_are_usage_errors(self):
        for url in ("http://127.0.0.1:1", "redis://127.0.0.1:99999", "redis://127.0.0.1:1/x",
                    "127.0.0.1:1"):
            with self.subTest(url=url):
                self.assertUsage(["-s", url], "-k", "x")

    def test_a_bad_url_message_masks_its_password(self):
        r = self.assertUsage(["-s", "http://user:url-Secret-9@127.0.0.1:1"], "-k", "x")
        self.assertNotIn("url-Secret-9", r.stderr)

    def test_a_tls_url_nobody_listens_on_is_unavailable(self):
        r = self.run_redlock(["-s", "rediss://127.0.0.1:1", "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 69)
        self.assertIn("127.0.0.1:1: Connection refused", r.stderr)

    def test_help_and_version(self):
        r = self.run_redlock(["--help"])
        self.assertStatus(r, 0)
        self.assertIn("run", r.stdout)
        r = self.run_redlock(["--version"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^redlock \d+\.\d+")

    def test_version_is_the_projects_everywhere(self):
        # One number: CMake's project version, which --version prints, the Debian changelog
        # opens with and the man pages carry. 0.4 is the release this round makes.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

        def read(*parts):
            with open(os.path.join(root, *parts)) as f:
                return f.read()

        version = re.search(r"project\(redlock VERSION (\S+)", read("CMakeLists.txt")).group(1)
        self.assertGreaterEqual(tuple(map(int, version.split("."))), (0, 4, 0))
        r = self.run_redlock(["--version"])
        self.assertStatus(r, 0)
        self.assertTrue(r.stdout.startswith(f"redlock {version} ("), r.stdout)
        self.assertTrue(read("packaging", "debian", "changelog")
                        .startswith(f"redlock ({version}) "))
        for page in ("redlock.1", "redlock.toml.5", "redlock-cron.5"):
            text = read("man", page)
            self.assertEqual(re.findall(r"redlock (\d+\.\d+\.\d+)", text),
                             [version] * len(re.findall(r"redlock \d+\.\d+\.\d+", text)), page)

    def test_usage_errors_name_the_word_at_fault_in_the_users_order(self):
        secret = "two-Secret-4"
        r = self.run_redlock(["-s", "redis://127.0.0.1:1", f"redis://:{secret}@127.0.0.1:2",
                              "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 64)
        self.assertEqual(r.stderr, "redlock: unexpected argument 'redis://:***@127.0.0.1:2' "
                                   "(one URL per -s: -s URL1 -s URL2)\n")
        # The same URL twice is no command.
        for words in (["run", "-k", "x", "--", "true"], ["status", "x"]):
            r = self.run_redlock(["-s", "redis://127.0.0.1:1", "redis://127.0.0.1:1", *words])
            self.assertStatus(r, 64)
            self.assertEqual(r.stderr, "redlock: unexpected argument 'redis://127.0.0.1:1' "
                                       "(one URL per -s: -s URL1 -s URL2)\n")
        r = self.run_redlock(["bogus"])
        self.assertStatus(r, 64)
        self.assertIn("unknown command 'bogus' (commands: run, status, list, history, watch, "
                      "exporter, acquire, extend, release, reap, doctor", r.stderr)
        r = self.run_redlock(["list", "first", "second"])
        self.assertStatus(r, 64)
        self.assertIn("unexpected argument 'first' (see 'redlock list --help')", r.stderr)
        # An unknown option is named before a required one that is missing.
        for words, unknown in ((["run", "--bogus"], "--bogus"),
                               (["run", "-t", "5s", "--bogus", "x"], "--bogus"),
                               (["release", "--nope"], "--nope")):
            with self.subTest(words=words):
                r = self.run_redlock(words)
                self.assertStatus(r, 64)
                self.assertIn(f"unexpected argument '{unknown}'", r.stderr)
                self.assertNotIn("is required", r.stderr)
        r = self.run_redlock(["run", "--", "true"])
        self.assertStatus(r, 64)
        self.assertIn("--key is required", r.stderr)
        # PROGRAM's own --help and words stay PROGRAM's.
        r = self.run_redlock(["-s", "redis://127.0.0.1:1", "run", "-k", "x", "--", "true",
                              "--help", "extra"])
        self.assertStatus(r, 69)

    def test_each_help_fits_80_columns_and_lists_what_applies(self):
        statuses = {"run": ["79", "126/127", "75 (or -E)"], "doctor": ["1 a risk"],
                    "release": ["declined"], "status": [], "list": [], "acquire": ["75"],
                    "extend": ["75"], "history": ["69"], "watch": [],
                    "exporter": ["69"]}
        for command in [""] + list(statuses):
            with self.subTest(command=command):
                r = self.run_redlock(([command] if command else []) + ["--help"])
                self.assertStatus(r, 0)
                self.assertEqual(r.stderr, "")
                for line in r.stdout.splitlines():
                    self.assertLessEqual(len(line), 80, line)
                self.assertNotIn(" ...", r.stdout)  # CLI11's "URL ..." and "NAME... ..."
                if command:
                    self.assertIn(f"Usage: redlock {command} ", r.stdout)
                    self.assertIn("-c, --config FILE   -s, --server URL", r.stdout)
                    footer = r.stdout[r.stdout.index("Exit status:"):]
                    for text in statuses[command] + ["64 usage", "70 internal error"]:
                        self.assertIn(text, footer)
                    if command != "doctor":
                        self.assertNotIn("doctor", footer)
                    if command != "run":
                        self.assertNotIn("79", footer)
        for command in ("acquire", "extend", "release"):
            r = self.run_redlock([command, "--help"])
            self.assertRegex(r.stdout, r"Usage: redlock .* NAME\n")
            self.assertNotIn("[name...]", r.stdout)

    # -- config errors

    def config(self, text, mode=0o600):
        return self.write_file("conf/config.toml", text, mode)

    def assertConfigError(self, config, line=None, must_mention=None):
        r, ran = self.run_lock(["-c", config], "-k", "x")
        self.assertFailure(r, ran, 78)
        self.assertRegex(r.stderr, FILE_LINE_COL)
        self.assertIn(config, r.stderr)
        if line is not None:
            self.assertRegex(r.stderr, re.escape(config) + f":{line}:\\d+: ")
        if must_mention is not None:
            self.assertIn(must_mention, r.stderr)
        return r

    def test_malformed_config_exits_78_naming_file_line_col(self):
        self.assertConfigError(self.config('# a comment\nttl = = "5s"\n'), line=2)
        self.assertConfigError(self.config('key_prefix = "unterminated\n'), line=1)

    def test_unknown_config_key_exits_78(self):
        self.assertConfigError(self.config('key_prefix = "a:"\n\nttll = "5s"\n'), line=3,
                               must_mention="ttll")
        self.assertConfigError(self.config('[[servers]]\nurl = "redis://127.0.0.1:1"\n'
                                           'passwrd_env = "X"\n'), line=3,
                               must_mention="passwrd_env")
        self.assertConfigError(self.config('[server]\nurl = "redis://127.0.0.1:1"\n'),
                               must_mention="server")

    def test_wrong_type_in_config_exits_78(self):
        self.assertConfigError(self.config('ttl = true\n'), line=1)
        self.assertConfigError(self.config('key_prefix = 5\n'), line=1)
        self.assertConfigError(self.config('[[servers]]\nurl = 5\n'), line=2)
        self.assertConfigError(self.config('servers = "redis://127.0.0.1:1"\n'), line=1)

    def test_bad_duration_in_config_exits_78(self):
        self.assertConfigError(self.config('\nttl = "5x"\n'), line=2)

    def test_missing_config_file_exits_78(self):
        missing = self.path("no-such-config.toml")
        r, ran = self.run_lock(["-c", missing], "-k", "x")
        self.assertFailure(r, ran, 78)
        self.assertIn(missing, r.stderr)
        r, ran = self.run_lock([], "-k", "x", env=self.env({"REDLOCK_CONFIG": missing}))
        self.assertFailure(r, ran, 78)

    def test_a_config_that_is_not_a_regular_file_exits_78_at_once(self):
        # open() on a FIFO blocks until a writer comes: a mistaken -c used to hang.
        fifo = self.path("config.fifo")
        os.mkfifo(fifo)
        for path in (fifo, self.tmp, "/dev/zero"):
            with self.subTest(path=path):
                r, ran = self.run_lock(["-c", path], "-k", "x", timeout=10.0)
                self.assertFailure(r, ran, 78)
                self.assertIn(f"redlock: cannot read config '{path}': not a regular file",
                              r.stderr)
        # /dev/null is the empty config (the defaults), as for ssh -F /dev/null.
        r = self.run_redlock(["-c", "/dev/null", "status", "x"], timeout=10.0)
        self.assertStatus(r, 69)
        self.assertIn("127.0.0.1:6379", r.stderr)
        config = self.config(f'[[servers]]\nurl = "redis://127.0.0.1:1"\n'
                             f'password_file = "{fifo}"\n')
        r, ran = self.run_lock(["-c", config], "-k", "x", timeout=10.0)
        self.assertFailure(r, ran, 78)
        self.assertIn("not a regular file", r.stderr)

    # -- output discipline

    def test_quiet_prints_nothing_on_success(self):
        server = self.redis_server()
        r = self.run_redlock(["-q", "-s", server.url(), "run", "-k", "q", "--", "true"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "")

    def test_verbose_messages_keep_the_house_format_and_hide_passwords(self):
        server = self.redis_server(requirepass="verbose-Pw-2")
        r = self.run_redlock(["-v", "-s", server.url(password="verbose-Pw-2"), "run", "-k", "v",
                              "--", "true"])
        self.assertStatus(r, 0)
        self.assertNotIn("verbose-Pw-2", r.stderr)
        self.assertEqual(r.stdout, "")
        for line in r.stderr.splitlines():
            self.assertTrue(line.startswith("redlock: "), r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
