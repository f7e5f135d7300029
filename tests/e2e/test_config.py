"""Where the config comes from and what it can say: search path, defaults for run,
passwords kept out of the file, and the warning for a readable file holding one."""

import os
import unittest

from redlock_e2e import LOCK_ACL_RULES, E2ETest

TOKEN_PROGRAM = ["sh", "-c", 'printf %s "$REDLOCK_TOKEN"']


class ConfigTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def servers_toml(self, url=None, extra=""):
        return f'[[servers]]\nurl = "{url or self.url}"\n{extra}'

    def assertRanWithLock(self, r, server=None, key="lock:x"):
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}$", r)
        self.assertKeyGone(server or self.server, key)

    # -- the search path

    def test_config_in_xdg_config_home_is_used(self):
        self.write_file("home/.config/redlock/config.toml",
                        'key_prefix = "xdg:"\n' + self.servers_toml())
        h = self.holder(["-k", "x"]).wait_ready()
        self.assertEqual(self.server.command("GET", "xdg:x"), h.token)
        self.assertEqual(h.release(), 0)

    def test_redlock_config_variable_names_the_file(self):
        config = self.write_file("elsewhere.toml", 'key_prefix = "env:"\n' + self.servers_toml())
        self.write_file("home/.config/redlock/config.toml", 'key_prefix = "xdg:"\n' +
                        self.servers_toml("redis://127.0.0.1:1"))
        h = self.holder(["-k", "x"], env=self.env({"REDLOCK_CONFIG": config})).wait_ready()
        self.assertEqual(self.server.command("GET", "env:x"), h.token)
        self.assertEqual(h.release(), 0)

    def test_verbose_says_which_config_was_read_or_that_none_was(self):
        r = self.run_redlock(["-v", "-s", self.url, "status", "x"])
        self.assertStatus(r, 0)
        self.assertIn("redlock: config: none found", r.stderr)
        self.assertIn("servers: 1 from -s", r.stderr)
        r = self.run_redlock(["-v", "status", "x"])  # no -s: the built-in server is named
        self.assertIn("built-in defaults, server redis://127.0.0.1:6379", r.stderr)
        config = self.write_file("home/.config/redlock/config.toml", self.servers_toml())
        r = self.run_redlock(["-v", "status", "x"])
        self.assertStatus(r, 0)
        self.assertIn(f"redlock: config: {config}\n", r.stderr)

    def test_a_missing_file_says_what_named_it(self):
        missing = self.path("nope.toml")
        r = self.run_redlock(["status", "x"], env=self.env({"REDLOCK_CONFIG": missing}))
        self.assertStatus(r, 78)
        self.assertIn(f"cannot read config '{missing}' (named by REDLOCK_CONFIG)", r.stderr)
        r = self.run_redlock(["-c", missing, "status", "x"])
        self.assertStatus(r, 78)
        self.assertIn(f"cannot read config '{missing}' (named by -c)", r.stderr)

    def test_dash_c_wins_over_redlock_config(self):
        config = self.write_file("mine.toml", 'key_prefix = "c:"\n' + self.servers_toml())
        other = self.write_file("other.toml", self.servers_toml("redis://127.0.0.1:1"))
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", *TOKEN_PROGRAM],
                             env=self.env({"REDLOCK_CONFIG": other}))
        self.assertRanWithLock(r, key="c:x")

    def test_dash_s_replaces_the_servers_of_the_config(self):
        config = self.write_file("c.toml", 'key_prefix = "s:"\n' +
                                 self.servers_toml("redis://127.0.0.1:1"))
        r = self.run_redlock(["-c", config, "-s", self.url, "run", "-k", "x", "--",
                              *TOKEN_PROGRAM])
        self.assertRanWithLock(r, key="s:x")

    def test_the_example_config_is_valid(self):
        example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "config.example.toml")
        if not os.path.exists(example):
            self.skipTest("no config.example.toml")
        with open(example) as f:
            text = f.read()
        # Point it at our server instead of 6379; everything else as shipped.
        line = 'url = "redis://127.0.0.1:6379"'
        self.assertIn("\n" + line + "\n", text)
        config = self.write_file("example.toml",
                                 text.replace("\n" + line + "\n", f'\nurl = "{self.url}"\n'))
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", *TOKEN_PROGRAM])
        self.assertRanWithLock(r)
        self.assertEqual(r.stderr, "")

    # -- lock defaults from the config

    def test_ttl_from_the_config_is_the_default(self):
        config = self.write_file("c.toml", 'ttl = "5m"\n' + self.servers_toml())
        h = self.holder(["-k", "x"], global_args=["-c", config]).wait_ready()
        pttl = self.server.command("PTTL", "lock:x")
        self.assertGreater(pttl, 30000)
        self.assertLessEqual(pttl, 300000)
        self.assertEqual(h.release(), 0)
        # -t overrides it
        h = self.holder(["-k", "x", "-t", "2m"], global_args=["-c", config]).wait_ready()
        self.assertLessEqual(self.server.command("PTTL", "lock:x"), 120000)
        self.assertEqual(h.release(), 0)

    def test_wait_from_the_config_is_the_default(self):
        config = self.write_file("c.toml", 'wait = "300ms"\n' + self.servers_toml())
        self.server.command("SET", "lock:x", "othertoken", "PX", "60000")
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 75)
        self.assertGreaterEqual(r.elapsed, 0.25)
        config0 = self.write_file("c0.toml", "wait = 0\n" + self.servers_toml())
        r = self.run_redlock(["-c", config0, "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 75)
        self.assertEqual(self.server.command("GET", "lock:x"), "othertoken")

    # -- passwords

    def test_password_from_an_environment_variable(self):
        server = self.redis_server(requirepass="env-Pw-1")
        config = self.write_file("c.toml", self.servers_toml(
            server.url(), 'password_env = "MY_REDIS_PW"\n'), mode=0o644)
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", *TOKEN_PROGRAM],
                             env=self.env({"MY_REDIS_PW": "env-Pw-1"}))
        self.assertRanWithLock(r, server)
        self.assertEqual(r.stderr, "")  # no password in the file, so no warning
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", "true"],
                             env=self.env({"MY_REDIS_PW": "wrong-Pw-2"}))
        self.assertStatus(r, 77)
        self.assertNotIn("wrong-Pw-2", r.stderr)
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", "true"])  # unset
        self.assertStatus(r, 78)
        self.assertMessages(r.stderr)

    def test_password_from_a_file_relative_to_the_config(self):
        server = self.redis_server(acl_user=("locker", "file-Pw-3", LOCK_ACL_RULES))
        self.write_file("conf/redis.password", "file-Pw-3\n")
        config = self.write_file("conf/c.toml", self.servers_toml(
            server.url(), 'username = "locker"\npassword_file = "redis.password"\n'))
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", *TOKEN_PROGRAM])
        self.assertRanWithLock(r, server)
        self.assertEqual(r.stderr, "")
        r = self.run_redlock(["-c", self.write_file("conf/bad.toml", self.servers_toml(
            server.url(), 'password_file = "no-such-file"\n')), "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 78)
        self.assertMessages(r.stderr)

    def test_a_readable_config_holding_a_password_gets_a_warning(self):
        server = self.redis_server(requirepass="url-Pw-4")
        url = server.url(password="url-Pw-4")
        private = self.write_file("private.toml", self.servers_toml(url), mode=0o600)
        r = self.run_redlock(["-c", private, "run", "-k", "x", "--", *TOKEN_PROGRAM])
        self.assertRanWithLock(r, server)
        self.assertEqual(r.stderr, "")
        readable = self.write_file("readable.toml", self.servers_toml(url), mode=0o644)
        r = self.run_redlock(["-c", readable, "run", "-k", "x", "--", *TOKEN_PROGRAM])
        self.assertRanWithLock(r, server)
        self.assertMessages(r.stderr)
        self.assertIn("readable.toml", r.stderr)
        self.assertNotIn("url-Pw-4", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
