"""The man pages: complete against `redlock --help` and the config parser, and clean
under groff's and man's warnings."""

import os
import re
import unittest

import support
from support import MAN1, MAN5, MAN5_CRON


class ManPageCoversTheCli(unittest.TestCase):
    def test_every_long_and_short_option_in_help_is_in_redlock_1(self):
        text = support.man_source_text(MAN1)
        missing = []
        for command in [()] + [(c,) for c in support.subcommands()]:
            longs, shorts = support.options(*command)
            self.assertIn("--help", longs, f"could not parse `redlock {' '.join(command)} --help`")
            for option in longs + shorts:
                if not support.mentions(text, option):
                    missing.append(f"redlock {' '.join(command)} {option}".replace("  ", " "))
        self.assertEqual(missing, [], "options printed by --help but missing from man/redlock.1")

    def test_every_command_in_help_has_its_own_subsection(self):
        commands_section = support.man_sections(MAN1)["COMMANDS"]
        headings = re.findall(r'^\.SS\s+"?([a-z]+)', commands_section, re.M)
        for command in support.subcommands():
            self.assertIn(command, headings, f"no .SS for `{command}` under COMMANDS")

    def test_every_exit_status_in_help_is_in_exit_status(self):
        section = support.man_sections(MAN1)["EXIT STATUS"]
        statuses = support.exit_statuses()
        self.assertIn("64", statuses)
        for status in statuses:
            self.assertRegex(section, rf"(?<!\d){status}(?!\d)", f"status {status}")

    def test_redlock_1_has_the_sections_users_look_for(self):
        sections = support.man_sections(MAN1)
        for title in ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "EXIT STATUS",
                      "ENVIRONMENT", "FILES", "EXAMPLES", "SAFETY", "JSON OUTPUT", "SEE ALSO"]:
            self.assertIn(title, sections)
        for variable in ["REDLOCK_CONFIG", "XDG_CONFIG_HOME", "HOME", "REDLOCK_KEY",
                         "REDLOCK_TOKEN"]:
            self.assertTrue(support.mentions(sections["ENVIRONMENT"], variable), variable)
        self.assertIn("flock (1)", sections["SEE ALSO"])
        self.assertIn("redlock.toml (5)", sections["SEE ALSO"])

    def test_redlock_toml_5_documents_every_key_the_parser_accepts(self):
        # The parser's key lists are the source of truth: a key added there without a man
        # page entry fails here.
        with open(os.path.join(support.SOURCE_DIR, "src", "config", "config.cpp")) as f:
            source = f.read()
        keys = set()
        for name in ["k_top_level_keys", "k_server_keys"]:
            match = re.search(name + r"\s*=\s*\{(.*?)\};", source, re.S)
            self.assertIsNotNone(match, f"{name} not found in config.cpp")
            keys |= set(re.findall(r'"([a-z_]+)"sv', match.group(1)))
        self.assertIn("key_prefix", keys)
        text = support.man_source_text(MAN5)
        tags = set(re.findall(r"^\.TP\n\.B \[*([a-z_]+)\]*$", text, re.M))
        self.assertEqual(sorted(keys - tags), [], "config keys without a .TP entry in redlock.toml.5")

    def test_redlock_cron_5_documents_every_setting_the_crontab_reader_accepts(self):
        with open(os.path.join(support.SOURCE_DIR, "src", "cron", "settings.cpp")) as f:
            source = f.read()
        match = re.search(r"k_keys\s*=\s*\{(.*?)\};", source, re.S)
        self.assertIsNotNone(match, "k_keys not found in settings.cpp")
        keys = set(re.findall(r'"([a-z-]+)"sv', match.group(1)))
        self.assertIn("catch-up", keys)
        section = support.man_sections(MAN5_CRON)["SETTINGS"].replace("\\-", "-")
        tags = set(re.findall(r"^\.B[IR]? ([a-z-]+)\b", section, re.M))
        self.assertEqual(sorted(keys - tags), [], "settings without a .TP entry in redlock-cron.5")

    def test_redlock_toml_5_documents_every_key_of_the_example_config(self):
        with open(os.path.join(support.SOURCE_DIR, "config.example.toml")) as f:
            example = f.read()
        keys = set(re.findall(r"^#?\s*([a-z_]+)\s*=", example, re.M))
        text = support.man_source_text(MAN5)
        for key in keys:
            self.assertTrue(support.mentions(text, key), key)


class DocsAgree(unittest.TestCase):
    """What the README and docs/, the man page, the examples and the demo tell a user to
    type."""

    def cron_lines(self):
        texts = {
            "README.md and docs/": "\n".join(
                open(path).read() for path in support.markdown_docs()),
            "man EXAMPLES": support.man_sections(MAN1)["EXAMPLES"].replace("\\-", "-"),
            "packaging/examples/crontab": open(os.path.join(
                support.SOURCE_DIR, "packaging", "examples", "crontab")).read(),
        }
        for where, text in texts.items():
            for line in text.splitlines():
                if re.match(r"^[0-9*/,-]+ [0-9*/,-]+ \* \* \*\s", line) and "redlock" in line:
                    yield where, line

    def test_every_cron_line_that_skips_quietly_says_q_and_e_0(self):
        lines = list(self.cron_lines())
        self.assertGreaterEqual(len({w for w, _ in lines}), 3, lines)
        for where, line in lines:
            if " -n " in line and "-E 0" in line or where == "man EXAMPLES":
                with self.subTest(where=where, line=line):
                    # A skip is a success (-E 0) and says nothing (-q), or cron mails it.
                    self.assertIn(" -q ", line)
                    self.assertIn(" -E 0 ", line)

    def test_the_demo_suggests_what_the_readme_says(self):
        demo = open(os.path.join(support.SOURCE_DIR, "scripts", "demo.sh")).read()
        readme = open(os.path.join(support.SOURCE_DIR, "README.md")).read()
        suggested = re.findall(r"(\S*scripts/test\.sh)", demo)
        self.assertTrue(suggested)
        for command in suggested:
            self.assertIn(command, readme)
        for line in demo.splitlines():
            if line.lstrip().startswith("say") and "redis-server" in line and "--port" in line:
                # A throwaway Redis without a password listens on loopback only.
                self.assertIn("--bind 127.0.0.1", line)


class ManPagesRenderCleanly(unittest.TestCase):
    def test_groff_ww_gives_no_warnings(self):
        groff = support.require_tool(self, "groff")
        for page in [MAN1, MAN5, MAN5_CRON]:
            with self.subTest(page=os.path.basename(page)):
                result = support.run([groff, "-man", "-ww", "-z", page], timeout=60)
                self.assertEqual(result.stderr, "")

    def test_man_l_renders_without_warnings(self):
        man = support.require_tool(self, "man")
        env = support.clean_env()
        env["MANWIDTH"] = "80"
        env["MAN_KEEP_FORMATTING"] = "0"
        for page in [MAN1, MAN5, MAN5_CRON]:
            with self.subTest(page=os.path.basename(page)):
                result = support.run([man, "--warnings=w", "-l", page], timeout=60, env=env)
                self.assertEqual(result.stderr, "")
                self.assertIn("redlock", result.stdout)
                # Nothing unformatted leaks through (a stray request or escape).
                self.assertNotRegex(result.stdout, r"(?m)^\s*\.[A-Z]{2}\b|\\f[BIRP]")

    def test_json_output_names_the_members_the_contract_promises(self):
        section = support.man_sections(MAN1)["JSON OUTPUT"]
        for member in ["name", "key", "state", "ttl_ms", "holder", "acquired_at"]:
            self.assertTrue(support.mentions(section, member), member)


if __name__ == "__main__":
    unittest.main()
