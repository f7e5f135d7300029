"""`cmake --install` puts every file in its standard place, honouring --prefix and
DESTDIR, and the installed completions are found where each shell looks."""

import gzip
import os
import re
import subprocess
import tempfile
import unittest

import support

EXPECTED = [
    "bin/redlock",
    "share/man/man1/redlock.1.gz",
    "share/man/man5/redlock.toml.5.gz",
    "share/man/man5/redlock-cron.5.gz",
    "share/doc/redlock/copyright",
    "share/doc/redlock/changelog.gz",
    "share/bash-completion/completions/redlock",
    "share/zsh/vendor-completions/_redlock",
    "share/fish/vendor_completions.d/redlock.fish",
    "share/doc/redlock/config.example.toml",
    "share/doc/redlock/examples/redlock-nightly.service",
    "share/doc/redlock/examples/redlock-nightly.timer",
    "share/doc/redlock/examples/crontab",
    "share/doc/redlock/examples/redlock-exporter.service",
    "share/doc/redlock/examples/redlock-reap.service",
    "share/doc/redlock/examples/redlock-cron.service",
    "share/doc/redlock/examples/redlock-cron-deployment.yaml",
    "share/doc/redlock/examples/redlock-alerts.yml",
    "share/doc/redlock/examples/redlock-alerts.test.yml",
]


def install(prefix, destdir=None):
    env = dict(os.environ)
    env.pop("DESTDIR", None)
    if destdir:
        env["DESTDIR"] = destdir
    support.run([support.CMAKE, "--install", support.BUILD_DIR, "--prefix", prefix],
                timeout=120, env=env)


class CmakeInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.prefix = os.path.join(cls.tmp.name, "opt", "redlock")
        install(cls.prefix)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_prefix_gets_every_file(self):
        for path in EXPECTED:
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, path)), path)

    def test_destdir_is_honoured(self):
        with tempfile.TemporaryDirectory() as stage:
            install("/usr", destdir=stage)
            for path in EXPECTED:
                self.assertTrue(os.path.isfile(os.path.join(stage, "usr", path)), path)
            self.assertEqual(os.listdir(stage), ["usr"], "nothing outside the prefix")

    def test_installed_binary_runs_and_reports_the_project_version(self):
        with open(os.path.join(support.SOURCE_DIR, "CMakeLists.txt")) as f:
            version = re.search(r"project\(redlock VERSION (\S+)", f.read()).group(1)
        binary = os.path.join(self.prefix, "bin", "redlock")
        self.assertTrue(os.access(binary, os.X_OK))
        out = support.run([binary, "--version"], timeout=20).stdout
        self.assertRegex(out, rf"^redlock {re.escape(version)} \(hiredis \d+\.\d+\.\d+, TLS: (OpenSSL 3\.[^)]*|built in, but [^\n]*)\)\n$")

    def test_installed_files_are_the_sources(self):
        pairs = {"share/man/man1/redlock.1.gz": "man/redlock.1",
                 "share/doc/redlock/changelog.gz": "packaging/debian/changelog",
                 "share/bash-completion/completions/redlock": "completions/redlock.bash",
                 "share/doc/redlock/config.example.toml": "config.example.toml"}
        for installed, source in pairs.items():
            with open(os.path.join(self.prefix, installed), "rb") as a, \
                    open(os.path.join(support.SOURCE_DIR, source), "rb") as b:
                got = a.read()
                if installed.endswith(".gz"):
                    self.assertEqual(got[3] & 0x08, 0, "gzip -n: no file name stored")
                    got = gzip.decompress(got)
                self.assertEqual(got, b.read(), installed)

    def test_man_finds_the_installed_pages_through_manpath(self):
        man = support.require_tool(self, "man")
        env = support.clean_env()
        env["MANPATH"] = os.path.join(self.prefix, "share", "man")
        env["MANWIDTH"] = "80"
        for page in (["1", "redlock"], ["5", "redlock.toml"]):
            result = support.run([man, *page], timeout=60, env=env)
            self.assertIn("redlock", result.stdout)

    def test_bash_completion_loader_finds_the_installed_completion(self):
        env = support.clean_env(home=self.tmp.name)
        env["XDG_DATA_DIRS"] = os.path.join(self.prefix, "share")
        offered = support.bash_complete(self, ["redlock", ""], completion_file=None, env=env)
        self.assertIn("run", offered)

    def test_zsh_finds_the_installed_completion_on_fpath(self):
        offered = support.zsh_complete(
            self, "redlock ", fpath_dir=os.path.join(self.prefix, "share/zsh/vendor-completions"),
            env=support.clean_env(home=self.tmp.name))
        self.assertIn("run", offered)

    def test_fish_finds_the_installed_completion_in_its_vendor_directory(self):
        # fish autoloads a completion only for a command on PATH, as an installed one is.
        env = support.clean_env(path_prefix=os.path.join(self.prefix, "bin"), home=self.tmp.name)
        env["XDG_DATA_DIRS"] = os.path.join(self.prefix, "share")
        offered = support.fish_complete(self, "redlock ", env=env, source="")
        self.assertIn("run", offered)


if __name__ == "__main__":
    unittest.main()
