"""Each completion loads in its shell and offers the commands, every option that
`redlock CMD --help` prints, lock names from `redlock list`, and files for -c."""

import os
import tempfile
import unittest

import support


class CompletionChecks:
    """The same checks for each shell; subclasses say how to ask the shell."""

    def complete(self, words):  # words: the command line, the last word being completed
        raise NotImplementedError

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.bin = os.path.join(self.tmp.name, "bin")
        os.mkdir(self.bin)

    def test_offers_every_command(self):
        offered = self.complete(["redlock", ""])
        for command in support.all_commands():
            self.assertIn(command, offered)

    def test_offers_global_options(self):
        longs, shorts = support.options()
        offered = self.complete(["redlock", "-"])
        for option in longs + shorts:
            self.assertIn(option, offered)

    def test_offers_every_option_each_command_prints_in_help(self):
        missing = []
        for command in support.subcommands():
            longs, shorts = support.options(command)
            offered = self.complete(["redlock", command, "--"])
            missing += [f"{command} {o}" for o in longs if o not in offered]
            offered = self.complete(["redlock", command, "-"])
            missing += [f"{command} {o}" for o in shorts if o not in offered]
        self.assertEqual(missing, [])

    def test_offers_lock_names_from_redlock_list_for_status_release_and_extend(self):
        support.stub_redlock(self.bin)
        env = self.env()
        for words in (["redlock", "status", ""], ["redlock", "release", "-k", ""],
                      ["redlock", "-q", "extend", ""]):
            offered = self.complete(words, env)
            self.assertIn("backup", offered, words)
            self.assertIn("deploy/prod", offered, words)
            self.assertNotIn("NAME", offered, "the table header is not a lock")
            self.assertFalse([o for o in offered if "~" in o], "a clipped name is not a lock")

    def test_lock_names_come_from_the_servers_of_the_command_line(self):
        support.stub_redlock(self.bin)
        offered = self.complete(["redlock", "-c", "/etc/other.toml", "status", ""], self.env())
        self.assertIn("cfg-other.toml", offered)

    def test_lock_names_fail_silently_without_a_server(self):
        support.failing_redlock(self.bin)
        offered = self.complete(["redlock", "status", ""], self.env())
        self.assertEqual([o for o in offered if not o.startswith("-")], [])

    def test_offers_files_for_config(self):
        with open(os.path.join(self.tmp.name, "locks.toml"), "w"):
            pass
        offered = self.complete(["redlock", "-c", os.path.join(self.tmp.name, "loc")])
        self.assertTrue([o for o in offered if o.endswith("locks.toml")], offered)

    def test_completes_program_after_run_as_its_own_command(self):
        offered = self.complete(["redlock", "run", "-k", "job", "--", "pytho"])
        self.assertTrue([o for o in offered if o.startswith("python3")], offered)
        self.assertNotIn("--key", self.complete(["redlock", "run", "-k", "job", "--", "ls", "--"]))

    def env(self):
        return support.clean_env(path_prefix=self.bin, home=self.tmp.name)


class BashCompletion(CompletionChecks, unittest.TestCase):
    def complete(self, words, env=None):
        return support.bash_complete(self, words, env=env or self.env())


class ZshCompletion(CompletionChecks, unittest.TestCase):
    def complete(self, words, env=None):
        line = " ".join(words)
        hits = support.zsh_complete(self, line, env=env or self.env())
        # zsh adds a path's last component; give back whole words like the other shells.
        prefix = os.path.dirname(words[-1]) if "/" in words[-1] else ""
        return [os.path.join(prefix, h) if prefix and not h.startswith("/") else h for h in hits]

    def test_file_parses_as_zsh(self):
        zsh = support.require_tool(self, "zsh")
        support.run([zsh, "-n", os.path.join(support.COMPLETIONS, "_redlock")])


class FishCompletion(CompletionChecks, unittest.TestCase):
    def complete(self, words, env=None):
        return support.fish_complete(self, " ".join(words), env=env or self.env())

    def test_file_parses_as_fish(self):
        fish = support.require_tool(self, "fish")
        support.run([fish, "--no-execute", os.path.join(support.COMPLETIONS, "redlock.fish")])


if __name__ == "__main__":
    unittest.main()
