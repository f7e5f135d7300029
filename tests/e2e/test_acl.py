"""ACL users that allow less than everything: what run, the waiters and doctor do.

EVALSHA refused while EVAL is allowed (an ACL without +evalsha, or a renamed command)
must not lose the lease at the first renewal; a user without DEL is told that a failed
attempt left its key behind.
"""

import json
import os
import unittest

from redlock_e2e import SLACK, LOCK_ACL_RULES, E2ETest, RedisError, server_version

USER, PASSWORD = "locker", "pw-locker-1"
OPERATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                          "operations.md")


def documented_acl_rules():
    """The rules of docs/operations.md's `redis-cli ACL SETUSER locker ...` command
    (without the user name and the password, which the test server adds): the first for
    Redis 7 and later, the second for Redis 6."""
    with open(OPERATIONS) as f:
        text = f.read()
    start = text.index("redis-cli ACL SETUSER locker")
    if server_version() < (7, 0):
        start = text.index("redis-cli ACL SETUSER locker", start + 1)
    command = text[start:text.index("```", start)].replace("\\\n", " ")
    words = [w.strip("'") for w in command.split()[4:]]
    return [w for w in words if w != ">PASSWORD"]


class AclTest(E2ETest):
    def server_for(self, rules):
        server = self.redis_server(acl_user=(USER, PASSWORD, rules))
        return server, server.url(username=USER, password=PASSWORD)

    def test_run_renews_and_waits_with_evalsha_refused(self):
        server, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -evalsha")
        # Several renewals (ttl/3 = 100 ms) over the same connection: each an EVALSHA.
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-t", "300ms", "--", "sleep", "1"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        self.assertKeyGone(server, "lock:x")
        # A waiter's attempts after the first go over an open connection too.
        holder = self.start_redlock(["-s", url, "run", "-k", "x", "--", "sleep", "0.6"])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-w", "10s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertEqual(holder.wait(30), 0)

    def test_doctor_checks_what_run_sends(self):
        _, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -evalsha")
        r = self.run_redlock(["-s", url, "doctor", "--json"])
        self.assertStatus(r, 0)
        checks = {c["name"]: c for c in json.loads(r.stdout)["servers"][0]["checks"]}
        self.assertEqual(checks["scripts"]["level"], "note")
        self.assertIn("EVALSHA is refused", checks["scripts"]["message"])
        _, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -eval")
        r = self.run_redlock(["-s", url, "doctor", "--json"])
        self.assertStatus(r, 1)
        checks = {c["name"]: c for c in json.loads(r.stdout)["servers"][0]["checks"]}
        self.assertEqual(checks["scripts"]["level"], "risk")

    def test_a_user_without_del_is_told_the_key_stays(self):
        # Acquiring needs no DEL (the metadata hash is replaced only when one was left
        # behind); the release does: PROGRAM runs, and the user is told the key stays.
        server, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -del")
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-t", "1m", "--", "sh", "-c",
                              "exit 3"])
        self.assertStatus(r, 3)
        self.assertIn("could not release 'x'", r.stderr)
        self.assertIn("permission denied", r.stderr)
        self.assertIn("expires there by its ttl", r.stderr)
        self.assertGreater(int(server.command("PTTL", "lock:x")), 0)

    # -- refusals: what is said, and that a refused attempt leaves nothing behind -------

    @staticmethod
    def said(server, *command, as_user=False):
        """The error the server gives `command` (as the user, or as no one): redlock passes
        it on in the server's words, which differ between versions."""
        with server.client(auth=False) as c:
            try:
                if as_user:
                    c.execute("AUTH", USER, PASSWORD)
                c.execute(*command)
            except RedisError as e:
                return str(e)
        raise AssertionError(f"{command} was not refused")

    def wrongpass(self, server):
        # "WRONGPASS invalid username-password pair or user is disabled." (Redis 6.0: up
        # to "pair").
        said = self.said(server, "AUTH", USER, "not-the-password")
        self.assertTrue(said.startswith("WRONGPASS invalid username-password pair"), said)
        return "authentication refused: " + said

    def test_a_refused_password_leaves_no_lock_behind(self):
        # The default user needs no password, so Redis runs the script pipelined behind the
        # refused AUTH as the default user: the attempt is released all the same.
        server, good = self.server_for(LOCK_ACL_RULES)
        for url in (server.url(username=USER, password="not-the-password"),
                    server.url(username="nosuch", password=PASSWORD)):
            for command in (["run", "-k", "x", "--", "touch", self.path("ran")],
                            ["acquire", "x"]):
                with self.subTest(url=url, command=command[0]):
                    r = self.run_redlock(["-s", url, *command])
                    self.assertStatus(r, 77)
                    self.assertEqual(r.stderr, f"redlock: cannot lock 'x': 127.0.0.1:"
                                               f"{server.port}: {self.wrongpass(server)}\n")
                    self.assertEqual(r.stdout, "")
                    self.assertFalse(os.path.exists(self.path("ran")))
                    self.assertKeyGone(server, "lock:x")
                    self.assertKeyGone(server, "{lock:x}:meta")
                    # The next run with the right password is not kept waiting.
                    r = self.run_redlock(["-s", good, "run", "-k", "x", "-n", "--", "true"])
                    self.assertStatus(r, 0)

    def test_a_refused_password_that_ran_nothing_says_only_that(self):
        # The default user needs a password too: nothing ran, nothing to clean up.
        server = self.redis_server(requirepass=PASSWORD)
        r = self.run_redlock(["-s", server.url(password="not-the-password"), "run", "-k", "x",
                              "--", "true"])
        self.assertStatus(r, 77)
        self.assertEqual(r.stderr, f"redlock: cannot lock 'x': 127.0.0.1:{server.port}: "
                                   f"{self.wrongpass(server)}\n")

    def test_an_acl_refusal_is_said_as_such_and_nothing_is_cleaned_up(self):
        # A user that needs no password (the default user), and one that gave the right one.
        nopass = self.redis_server(extra_args=("--user", "default", "on", "nopass", "resetkeys",
                                               "~other:*", "+@all"))
        server, url = self.server_for("on ~other:* +@all")
        for url, port, denied in (
                (nopass.url(), nopass.port, self.said(nopass, "GET", "lock:x")),
                (url, server.port, self.said(server, "GET", "lock:x", as_user=True))):
            with self.subTest(url=url):
                # "NOPERM this user has no permissions to access one of the keys used as
                # arguments" (Redis 8, Valkey 8: "NOPERM No permissions to access a key").
                self.assertTrue(denied.startswith("NOPERM"), denied)
                r = self.run_redlock(["-s", url, "run", "-k", "x", "--", "true"])
                self.assertStatus(r, 77)
                # The refusal came before the script ran: no "could not clean up" note.
                self.assertEqual(r.stderr, f"redlock: cannot lock 'x': 127.0.0.1:{port}: "
                                           f"permission denied by the server's ACL: {denied}\n")
        # A command refused: named.
        server, url = self.server_for(LOCK_ACL_RULES + " -eval -evalsha")
        r = self.run_redlock(["-s", url, "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 77)
        # "NOPERM this user has no permissions to run the 'eval' command" (Redis 6.0: "...
        # command or its subcommand"; Redis 8, Valkey 8: "NOPERM User locker has ...").
        said = self.said(server, "EVAL", "return 1", "0", as_user=True)
        self.assertEqual(r.stderr, f"redlock: cannot lock 'x': 127.0.0.1:{server.port}: "
                                   f"permission denied by the server's ACL: {said}\n")
        self.assertTrue(said.startswith("NOPERM"), said)
        self.assertIn("no permissions to run the 'eval' command", said)

    def test_the_documented_least_privilege_user_can_do_everything(self):
        rules = documented_acl_rules()
        server, url = self.server_for(" ".join(rules))
        args = ["-s", url]
        # run, and a waiter woken by the release (channel and PUBLISH/SUBSCRIBE allowed).
        holder = self.start_redlock(args + ["run", "-k", "x", "--", "sleep", "0.8"])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(["-v"] + args + ["run", "-k", "x", "-w", "20s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stderr, r"after [123] attempts?")
        self.assertEqual(holder.wait(30), 0)
        # A --fair waiter: ticket, queue, place in line (ZRANK), leaving the queue.
        # (Held for 3 s, SLACK scaled: "next in line" is said only if the lock is still held
        # when the waiter gets there, which a loaded machine can delay past 0.8 s.)
        holder = self.start_redlock(args + ["run", "-k", "x", "--", "sleep", str(3 * SLACK)])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(args + ["run", "-k", "x", "--fair", "-w", "20s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertIn("next in line", r.stderr)
        self.assertEqual(holder.wait(30), 0)
        # --once-per: the slot claimed, a second run refused, the run's end recorded.
        for expected in (0, 75):
            r = self.run_redlock(args + ["run", "-k", "slot", "--once-per", "1h", "--", "true"])
            self.assertStatus(r, expected)
        r = self.run_redlock(args + ["status", "--json", "slot"])
        self.assertEqual(json.loads(r.stdout)["locks"][0]["last_run"]["exit_status"], 0)
        # --limit: permits, the holders' set, status of a semaphore, its release.
        holder = self.start_redlock(args + ["run", "-k", "pool", "--limit", "2", "--",
                                            "sleep", "0.8"])
        self.wait_for_key(server, "lock:pool", holder)
        r = self.run_redlock(args + ["run", "-k", "pool", "--limit", "2", "-t", "1s", "--",
                                     "sleep", "0.5"])
        self.assertStatus(r, 0)
        self.assertStatus(self.run_redlock(args + ["status", "pool"]), 0)
        self.assertEqual(holder.wait(30), 0)
        # acquire, extend, release; status, list; release --force; doctor.
        r = self.run_redlock(args + ["acquire", "-t", "1m", "y"])
        self.assertStatus(r, 0)
        token = r.stdout.strip()
        self.assertStatus(self.run_redlock(args + ["extend", "y", "--token", token]), 0)
        self.assertStatus(self.run_redlock(args + ["status", "y"]), 0)
        self.assertStatus(self.run_redlock(args + ["list"]), 0)
        self.assertStatus(self.run_redlock(args + ["release", "y", "--token", token]), 0)
        self.assertStatus(self.run_redlock(args + ["acquire", "z"]), 0)
        self.assertStatus(self.run_redlock(args + ["release", "z", "--force", "--yes"]), 0)
        r = self.run_redlock(args + ["doctor"])
        self.assertNotIn("NOPERM", r.stdout + r.stderr)
        self.assertNotIn("cannot read", r.stdout + r.stderr)
        for key in ("lock:x", "lock:y", "lock:z", "lock:pool"):
            self.assertKeyGone(server, key)

    # -- doctor's acl check: ACL DRYRUN where the user may run it, else probing ----------

    DRYRUN = ["+acl|dryrun", "+acl|whoami"]
    PROBE_KEYS = ("lock:redlock-doctor-probe", "{lock:redlock-doctor-probe}:meta",
                  "{lock:redlock-doctor-probe}:queue", "{lock:redlock-doctor-probe}:permit:1")

    def doctor_acl(self, rules, expected_status):
        """doctor's acl check for a user with `rules`: text and --json agree; the probe lock
        is gone afterwards and the output never shows the password."""
        if "+acl|dryrun" in rules:
            self.require_server((7, 0), "ACL DRYRUN")
        server, url = self.server_for(" ".join(rules))
        r = self.run_redlock(["-s", url, "doctor"])
        self.assertStatus(r, expected_status)
        self.assertNotIn(PASSWORD, r.stdout + r.stderr)
        self.doctor_stdout = r.stdout
        lines = r.stdout.splitlines()
        start = next(i for i, l in enumerate(lines) if l.split()[1:2] == ["acl"])
        end = next(i for i in range(start + 1, len(lines)) if lines[i].split()[1:2] == ["tls"])
        text = " ".join(" ".join(lines[start:end]).split())
        for line in lines:
            self.assertLessEqual(len(line), 80, r.stdout)
        j = self.run_redlock(["-s", url, "doctor", "--json"])
        self.assertStatus(j, expected_status)
        checks = {c["name"]: c for c in json.loads(j.stdout)["servers"][0]["checks"]}
        for key in self.PROBE_KEYS:
            self.assertKeyGone(server, key)
        return text, checks["acl"]

    def documented_rules_without(self, *names):
        return [w for w in documented_acl_rules() if w not in names]

    def test_doctor_acl_the_documented_user_is_ok_by_probing(self):
        text, acl = self.doctor_acl(documented_acl_rules(), 0)
        self.assertEqual(acl["level"], "ok")
        self.assertIn("user 'locker' may run every command redlock sends", acl["message"])
        self.assertIn("ACL DRYRUN is not allowed", acl["message"])
        self.assertTrue(text.startswith("ok acl user 'locker' may run every command"), text)

    def test_doctor_acl_the_documented_user_with_dryrun_is_ok_by_dryrun(self):
        _, acl = self.doctor_acl(documented_acl_rules() + self.DRYRUN, 0)
        self.assertEqual(acl["level"], "ok")
        self.assertIn("(checked with ACL DRYRUN)", acl["message"])

    def test_doctor_acl_without_publish_is_a_note_naming_it(self):
        for extra, how in (([], "ACL DRYRUN is not allowed"), (self.DRYRUN, "checked with")):
            with self.subTest(how=how):
                text, acl = self.doctor_acl(self.documented_rules_without("+publish") + extra, 0)
                self.assertEqual(acl["level"], "note")
                self.assertIn("may not run PUBLISH (waiters poll", acl["message"])
                self.assertIn("ACL SETUSER locker +publish (", acl["message"])
                self.assertIn(how, acl["message"])
                self.assertTrue(text.startswith("note acl"), text)

    def test_doctor_acl_without_pexpire_is_a_risk_naming_it(self):
        # Probing: a refusal inside a script names no command before Redis 7.2; the script's
        # list is given.
        text, acl = self.doctor_acl(self.documented_rules_without("+pexpire"), 1)
        # A refused command stops locking; it does not hand a lock to two holders.
        self.assertIn("found: locking fails where commands are refused\n", self.doctor_stdout)
        self.assertEqual(acl["level"], "risk")
        if server_version() >= (7, 2):
            self.assertIn("may not run PEXPIRE (run, acquire, extend and release fail",
                          acl["message"])
            self.assertIn("ACL SETUSER locker +pexpire (", acl["message"])
        else:
            self.assertIn("may not run one of PEXPIRE HINCRBY TYPE GET DEL HSET TIME HDEL PTTL "
                          "SET (run, acquire, extend and release fail)", acl["message"])
            self.assertIn("ACL SETUSER locker +pexpire +hincrby +type +get +del +hset +time "
                          "+hdel +pttl +set", acl["message"])
        self.assertTrue(text.startswith("RISK acl"), text)
        # With DRYRUN, or MULTI (commands queued, then discarded), PEXPIRE is named.
        for extra, how in ((self.DRYRUN, "checked with"),
                           (["+multi", "+discard"], "ACL DRYRUN is not allowed")):
            with self.subTest(how=how):
                text, acl = self.doctor_acl(self.documented_rules_without("+pexpire") + extra, 1)
                self.assertEqual(acl["level"], "risk")
                self.assertIn("may not run PEXPIRE (run, acquire, extend and release fail",
                              acl["message"])
                self.assertIn("ACL SETUSER locker +pexpire (", acl["message"])
                self.assertIn(how, acl["message"])
                self.assertTrue(text.startswith("RISK acl"), text)

    def test_doctor_acl_a_key_pattern_short_of_the_prefix_is_a_risk_naming_it(self):
        for extra, how in (([], "ACL DRYRUN is not allowed"), (self.DRYRUN, "checked with")):
            with self.subTest(how=how):
                _, acl = self.doctor_acl(self.documented_rules_without("~{lock:*}:*") + extra, 1)
                self.assertEqual(acl["level"], "risk")
                self.assertIn("may not access the keys '{lock:*}:*' (run, acquire, extend and "
                              "release fail", acl["message"])
                self.assertIn("ACL SETUSER locker '~{lock:*}:*' (", acl["message"])
                self.assertNotIn("'lock:*'", acl["message"])
                self.assertIn(how, acl["message"])

    def test_doctor_acl_leaves_real_locks_alone(self):
        server, url = self.server_for(" ".join(documented_acl_rules()))
        holder = self.start_redlock(["-s", url, "run", "-k", "x", "--", "sleep", "30"])
        self.wait_for_key(server, "lock:x", holder)
        token = server.command("GET", "lock:x")
        ttl = server.command("PTTL", "lock:x")
        self.assertStatus(self.run_redlock(["-s", url, "doctor"]), 0)
        self.assertEqual(server.command("GET", "lock:x"), token)
        self.assertLessEqual(server.command("PTTL", "lock:x"), ttl + 11000)
        holder.send_signal(15)
        holder.wait(30)

    def test_rediscli_auth_is_read_only_when_the_config_names_it(self):
        server = self.redis_server(requirepass=PASSWORD)
        env = self.env({"REDISCLI_AUTH": PASSWORD})
        # Not by itself: no password is sent, and the server refuses.
        r = self.run_redlock(["-s", server.url(), "run", "-k", "x", "--", "true"], env=env)
        self.assertStatus(r, 77)
        self.assertNotIn(PASSWORD, r.stderr)
        config = self.write_file("c.toml", f'[[servers]]\nurl = "{server.url()}"\n'
                                           'password_env = "REDISCLI_AUTH"\n')
        r = self.run_redlock(["-c", config, "run", "-k", "x", "--", "true"], env=env)
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")

    def wait_for_key(self, server, key, proc):
        from redlock_e2e import wait_until
        wait_until(lambda: server.command("EXISTS", key), 15, message=key, proc=proc)


if __name__ == "__main__":
    unittest.main()
