"""The Debian package: CPack builds it from the build tree into a scratch directory; it
declares the right metadata and dependencies, holds every installed file, and the
binary runs from a root it was unpacked into with `dpkg -x`."""

import glob
import os
import re
import tempfile
import unittest

import support

EXPECTED = [
    "usr/bin/redlock",
    "usr/share/man/man1/redlock.1.gz",
    "usr/share/man/man5/redlock.toml.5.gz",
    "usr/share/man/man5/redlock-cron.5.gz",
    "usr/share/doc/redlock/copyright",
    "usr/share/doc/redlock/changelog.gz",
    "usr/share/bash-completion/completions/redlock",
    "usr/share/zsh/vendor-completions/_redlock",
    "usr/share/fish/vendor_completions.d/redlock.fish",
    "usr/share/doc/redlock/config.example.toml",
    "usr/share/doc/redlock/examples/redlock-nightly.service",
    "usr/share/doc/redlock/examples/redlock-nightly.timer",
    "usr/share/doc/redlock/examples/crontab",
    "usr/share/doc/redlock/examples/redlock-exporter.service",
    "usr/share/doc/redlock/examples/redlock-reap.service",
    "usr/share/doc/redlock/examples/redlock-cron.service",
    "usr/share/doc/redlock/examples/redlock-cron-deployment.yaml",
    "usr/share/doc/redlock/examples/redlock-alerts.yml",
    "usr/share/doc/redlock/examples/redlock-alerts.test.yml",
]


project_version = support.project_version


def owning_package(path):
    """The Debian package that ships a library, trying the /lib and /usr/lib spellings of
    its path (merged /usr); None when dpkg does not know it."""
    real = os.path.realpath(path)
    candidates = {path, real}
    for p in list(candidates):
        if p.startswith("/usr/lib/"):
            candidates.add(p[len("/usr"):])
        elif p.startswith("/lib/"):
            candidates.add("/usr" + p)
    for candidate in sorted(candidates):
        result = support.run(["dpkg", "-S", candidate], timeout=30, check=False)
        if result.returncode == 0:
            return result.stdout.split(":")[0].strip()
    return None


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.out = os.path.join(cls.tmp.name, "out")
        cls.root = os.path.join(cls.tmp.name, "root")
        cls.deb = None

    def setUp(self):
        support.require_tool(self, "dpkg-deb")
        support.require_tool(self, "dpkg-shlibdeps")
        if DebianPackage.deb is None:
            # CPack with the project's CPackConfig.cmake, fed from a staged
            # `cmake --install --strip` of the build tree under test rather than through
            # its own install step: that step first builds the "preinstall" target (all of
            # the tree, tests included), which is neither quick nor safe while other tests
            # run the binaries. `cpack` in a built tree gives the same package.
            config = os.path.join(support.BUILD_DIR, "CPackConfig.cmake")
            self.assertTrue(os.path.exists(config),
                            f"{config} missing: is packaging/install.cmake included?")
            stage = os.path.join(self.tmp.name, "stage")
            env = dict(os.environ, DESTDIR=stage)
            support.run([support.CMAKE, "--install", support.BUILD_DIR, "--prefix", "/usr",
                         "--strip"], timeout=120, env=env)
            support.run([support.CPACK, "-G", "DEB", "--config", config, "-B", self.out,
                         "-D", "CPACK_INSTALL_CMAKE_PROJECTS=",
                         "-D", f"CPACK_INSTALLED_DIRECTORIES={stage}/usr;usr"], timeout=120)
            debs = glob.glob(os.path.join(self.out, "*.deb"))
            self.assertEqual(len(debs), 1, debs)
            DebianPackage.deb = debs[0]
            support.run(["dpkg-deb", "-x", DebianPackage.deb, self.root], timeout=60)

    def field(self, name):
        return support.run(["dpkg-deb", "-f", self.deb, name], timeout=30).stdout.strip()

    def test_file_name_and_metadata(self):
        self.assertRegex(os.path.basename(self.deb),
                         rf"^redlock_{re.escape(project_version())}_[a-z0-9]+\.deb$")
        self.assertEqual(self.field("Package"), "redlock")
        self.assertEqual(self.field("Version"), project_version())
        self.assertEqual(self.field("Section"), "utils")
        self.assertTrue(self.field("Maintainer"))
        description = self.field("Description").splitlines()
        self.assertGreater(len(description), 2, "a summary and a long description")
        for line in description[1:]:
            self.assertTrue(line.startswith(" ") and len(line) <= 80, repr(line))

    def test_depends_on_the_packages_of_the_shared_libraries_the_binary_loads(self):
        # From the packaged binary itself, so the check follows the link mode (a static
        # libstdc++ or a header-only toml++ needs no package).
        depends = {d.strip().split()[0] for d in self.field("Depends").split(",")}
        binary = os.path.join(self.root, "usr", "bin", "redlock")
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                            support.run(["readelf", "-d", binary], timeout=30).stdout)
        self.assertTrue(needed)
        packages = {}
        for line in support.run(["ldd", binary], timeout=30).stdout.splitlines():
            # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", and the loader
            # as "/lib64/ld-linux-x86-64.so.2 (0x...)".
            match = re.match(r"\s*(\S+) => (/\S+)", line) or \
                re.match(r"\s*((/\S+/)?(\S+)) \(0x", line)
            if not match:
                continue
            name, path = (match.group(1), match.group(2)) if "=>" in line else \
                (match.group(3), match.group(1))
            if name in needed:
                packages[name] = owning_package(path)
        self.assertEqual(set(needed), set(packages), "ldd resolves every NEEDED library")
        for library, package in packages.items():
            if package is not None:
                self.assertIn(package, depends, f"{library} comes from {package}")
        self.assertIn("libc6", depends)
        # And nothing more: a library linked statically (hiredis, libstdc++) needs no
        # package, and a Depends on it would pull in what the binary never loads.
        loaded = set(packages.values())
        for package in depends:
            if package.startswith("lib"):
                self.assertIn(package, loaded, f"{package} is in Depends, but not loaded")


    def test_holds_every_installed_file(self):
        for path in EXPECTED:
            self.assertTrue(os.path.isfile(os.path.join(self.root, path)), path)
        listing = support.run(["dpkg-deb", "-c", self.deb], timeout=30).stdout
        for line in listing.splitlines():
            self.assertIn("root/root", line, "files belong to root")
            path = line.split()[-1]
            self.assertTrue(path.startswith("./usr/"), path)

    def test_redlock_version_runs_from_the_scratch_root(self):
        binary = os.path.join(self.root, "usr", "bin", "redlock")
        self.assertTrue(os.access(binary, os.X_OK))
        out = support.run([binary, "--version"], timeout=20).stdout
        self.assertRegex(out, rf"^redlock {re.escape(project_version())} "
                              r"\(hiredis \d+\.\d+\.\d+, TLS: (OpenSSL 3\.[^)]*|built in, but [^\n]*)\)\n$")
        help_text = support.run([binary, "--help"], timeout=20).stdout
        self.assertIn("run", help_text)

    def test_binary_is_stripped(self):
        binary = os.path.join(self.root, "usr", "bin", "redlock")
        with open(binary, "rb") as f:
            self.assertNotIn(b".debug_info", f.read())
        with open(os.path.join(support.BUILD_DIR, "CPackConfig.cmake")) as f:
            self.assertIn('set(CPACK_STRIP_FILES "ON")', f.read(), "plain `cpack` strips too")

    def test_packaged_man_page_renders(self):
        man = support.require_tool(self, "man")
        env = support.clean_env()
        env["MANWIDTH"] = "80"
        page = os.path.join(self.root, "usr", "share", "man", "man1", "redlock.1.gz")
        result = support.run([man, "--warnings=w", "-l", page], timeout=60, env=env)
        self.assertEqual(result.stderr, "")

    def test_lintian_finds_no_error_and_no_warning(self):
        lintian = support.require_tool(self, "lintian")
        # Info-level tags are not failures; each one left is explained here:
        #   hardening-no-bindnow  -z now would resolve every symbol at start-up, which a
        #                         cron wrapper pays on every run (bench/startup.sh)
        result = support.run([lintian, "--tag-display-limit", "0", "--fail-on", "error,warning",
                              self.deb], timeout=300, check=False)
        tags = [l for l in result.stdout.splitlines() if re.match(r"^[EW]: ", l)]
        self.assertEqual(tags, [], result.stdout + result.stderr)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_changelog_version_is_the_project_version(self):
        with open(os.path.join(support.SOURCE_DIR, "packaging", "debian", "changelog")) as f:
            first = f.readline()
        self.assertTrue(first.startswith(f"redlock ({project_version()}) "), first)


class ReleaseDebianPackages(unittest.TestCase):
    """The .debs scripts/release.sh built (CTest `release: deb`, label release, after the
    `release: build` fixture; left out of `packaging: test_deb` by load_tests below)."""

    def setUp(self):
        import release  # the release tests' helpers; only these tests need them
        release.require_dist(self)
        support.require_tool(self, "dpkg-deb")
        self.release = release
        self.debs = {arch: os.path.join(release.DIST, f"redlock_{project_version()}_{deb}.deb")
                     for arch, (deb, _) in release.ARCHES.items()}

    def field(self, deb, name):
        return support.run(["dpkg-deb", "-f", deb, name], timeout=30).stdout.strip()

    def test_metadata_and_depends_on_libc6_alone(self):
        for arch, deb in self.debs.items():
            with self.subTest(arch):
                self.assertEqual(self.field(deb, "Package"), "redlock")
                self.assertEqual(self.field(deb, "Version"), project_version())
                self.assertEqual(self.field(deb, "Architecture"),
                                 self.release.ARCHES[arch][0])
                depends = self.field(deb, "Depends")
                match = re.fullmatch(r"libc6 \(>= 2\.(\d+)\)", depends)
                self.assertIsNotNone(match, depends)
                self.assertLessEqual(int(match.group(1)), 28, depends)
                self.assertEqual(self.field(deb, "Recommends"), "libssl3 | libssl1.1")
                self.assertGreater(int(self.field(deb, "Installed-Size")), 1000)

    def test_holds_every_installed_file_owned_by_root(self):
        for arch, deb in self.debs.items():
            with self.subTest(arch):
                listing = support.run(["dpkg-deb", "-c", deb], timeout=30).stdout
                paths = [line.split()[-1] for line in listing.splitlines()]
                for path in EXPECTED:
                    self.assertIn("./" + path, paths)
                for line in listing.splitlines():
                    self.assertIn(" root/root ", line)
                control = support.run(["dpkg-deb", "-I", deb, "md5sums"], timeout=30).stdout
                self.assertIn("usr/bin/redlock", control)

    def test_the_amd64_package_runs_here(self):
        with tempfile.TemporaryDirectory() as root:
            support.run(["dpkg-deb", "-x", self.debs["x86_64"], root], timeout=60)
            out = support.run([os.path.join(root, "usr", "bin", "redlock"), "--version"],
                              timeout=20).stdout
            self.assertRegex(out, rf"^redlock {re.escape(project_version())} ")

    def test_lintian_finds_no_error_and_no_warning(self):
        lintian = support.require_tool(self, "lintian")
        for arch, deb in self.debs.items():
            with self.subTest(arch):
                result = support.run([lintian, "--tag-display-limit", "0", "--fail-on",
                                      "error,warning", deb], timeout=300, check=False)
                tags = [l for l in result.stdout.splitlines() if re.match(r"^[EW]: ", l)]
                self.assertEqual(tags, [], result.stdout + result.stderr)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


def load_tests(loader, tests, pattern):
    """`runtests.py test_deb` (packaging: test_deb) runs the CPack package's tests only;
    the release packages' run as `test_deb.ReleaseDebianPackages` (release: deb)."""
    suite = unittest.TestSuite()
    suite.addTests(loader.loadTestsFromTestCase(DebianPackage))
    return suite


if __name__ == "__main__":
    unittest.main()
