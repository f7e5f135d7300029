#!/usr/bin/env bash
# Usage: scripts/release.sh [--dist DIR] [--work DIR] [--cache DIR] [--arch ARCH]...
#
# Builds the release artifacts of the checkout into dist/ (or DIR):
#   redlock-VERSION-linux-x86_64.tar.gz, redlock-VERSION-linux-aarch64.tar.gz
#   redlock_VERSION_amd64.deb, redlock_VERSION_arm64.deb
#   redlock-VERSION-1.x86_64.rpm, redlock-VERSION-1.aarch64.rpm
#   SHA256SUMS
# VERSION is the CMake project version. Each binary is built by the host's g++ 12 (native,
# or aarch64-linux-gnu-g++-12) against a Debian 11 sysroot (packaging/release/sysroot.sh)
# with REDLOCK_PORTABLE=ON, so that it needs no glibc symbol newer than GLIBC_2.28; the
# build fails if it does, or if it is over 3 MiB stripped (packaging/release/
# check_binary.cmake). libstdc++, libgcc and hiredis are linked in; OpenSSL (3 or 1.1) is
# loaded for rediss:// servers only.
#
# The bytes depend only on the commit (and the sysroot's Debian packages): SOURCE_DATE_EPOCH
# is the commit's time unless set, paths are mapped out of the binary, tar members are
# sorted with fixed owners and times, gzip -n, dpkg-deb and rpmbuild clamp to that time.
# Two runs give the same SHA256SUMS (tests/packaging/test_release.py checks it).
#
# Everything is built afresh in the work dir (default build/release, wiped first): no
# compiler cache, nothing kept from an earlier run but the sysroots in the cache dir
# (default build/release-cache; REDLOCK_RELEASE_CACHE too), which hold Debian's packages
# as fetched. Needs: the packages scripts/setup.sh installs (g++-aarch64-linux-gnu, rpm,
# dpkg-dev...) and Debian's archive; no root. Environment: JOBS (default 2),
# SOURCE_DATE_EPOCH, REDLOCK_DEBIAN_MIRROR (packaging/release/sysroot.sh).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
dist=$root/dist
work=$root/build/release
cache=${REDLOCK_RELEASE_CACHE:-$root/build/release-cache}
arches=()
jobs=${JOBS:-2}
while (($#)); do
    case $1 in
    --dist) dist=$(realpath -m "$2"); shift ;;
    --work) work=$(realpath -m "$2"); shift ;;
    --cache) cache=$(realpath -m "$2"); shift ;;
    --arch) arches+=("$2"); shift ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "release.sh: unknown argument '$1' (see --help)" >&2
        exit 64
        ;;
    esac
    shift
done
((${#arches[@]})) || arches=(x86_64 aarch64)

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
    SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null) || {
        echo "release.sh: not a git checkout: set SOURCE_DATE_EPOCH" >&2
        exit 64
    }
fi
export SOURCE_DATE_EPOCH
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    echo "release.sh: note: the checkout has uncommitted changes; they are built too"
fi
# Nothing of the caller's locale, time zone or umask in the bytes.
export LC_ALL=C TZ=UTC
umask 022

for tool in dpkg-deb rpmbuild cmake ninja gzip tar sha256sum; do
    command -v "$tool" >/dev/null || {
        echo "release.sh: $tool is missing (bash scripts/setup.sh installs it)" >&2
        exit 69
    }
done

# dist/ is emptied first, and must hold nothing but an earlier release's files; the work
# dir is this script's own.
if [[ -d $dist ]] && find "$dist" -mindepth 1 ! -name 'redlock[-_]*' ! -name SHA256SUMS | grep -q .; then
    echo "release.sh: $dist holds files of its own; give an empty or new --dist" >&2
    exit 64
fi
rm -rf "$work" "$dist"
mkdir -p "$work" "$dist" "$cache"
started=$SECONDS

# Every file and directory under $1 with fixed permissions and time.
normalize() {
    find "$1" -type d -exec chmod 0755 {} +
    find "$1" -type f -exec chmod 0644 {} +
    find "$1" -type f -path '*/bin/*' -exec chmod 0755 {} +
    find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# The highest GLIBC_x.y the binary $1 asks for ("2.28").
highest_glibc() {
    readelf -W -V "$1" | grep -o 'Name: GLIBC_[0-9.]*' | sed 's/Name: GLIBC_//' | sort -V | tail -1
}

version=
for arch in "${arches[@]}"; do
    case $arch in
    x86_64) deb_arch=amd64 ;;
    aarch64) deb_arch=arm64 ;;
    *)
        echo "release.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2
        exit 64
        ;;
    esac
    echo "==== $arch"
    sysroot=$cache/sysroot-$arch
    bash packaging/release/sysroot.sh "$arch" "$sysroot"
    build=$work/$arch
    # -O2 as the default build (RelWithDebInfo), without -g: the release binary runs the
    # code the tests ran.
    cmake -S "$root" -B "$build" -G Ninja \
        -DCMAKE_TOOLCHAIN_FILE="$root/packaging/release/toolchain.cmake" \
        -DREDLOCK_TARGET_ARCH="$arch" -DREDLOCK_SYSROOT="$sysroot" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
        -DCMAKE_CXX_COMPILER_LAUNCHER= -DREDLOCK_PORTABLE=ON -DREDLOCK_BUILD_TESTS=OFF \
        -DREDLOCK_SANITIZE= >"$build.configure.log" 2>&1 || {
        cat "$build.configure.log" >&2
        exit 1
    }
    cmake --build "$build" -j"$jobs"
    version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
    glibc=$(highest_glibc "$build/redlock")

    # The tarball: a prefix tree (bin/, share/), to unpack into /usr/local or anywhere.
    name=redlock-$version-linux-$arch
    tree=$build/tar/$name
    DESTDIR=$tree cmake --install "$build" --prefix / --strip >/dev/null
    # README.md links to the guides in docs/: they travel together, in the doc directory,
    # so that unpacking into /usr/local leaves nothing at its top.
    cp -R LICENSE README.md docs "$tree/share/doc/redlock/"
    normalize "$build/tar"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        --format=gnu -C "$build/tar" -cf - "$name" | gzip -9n >"$dist/$name.tar.gz"

    # The .deb: the /usr tree, a control file from packaging/release/control.in.
    stage=$build/stage
    DESTDIR=$stage cmake --install "$build" --prefix /usr --strip >/dev/null
    normalize "$stage"
    deb=$build/deb
    cp -a "$stage" "$deb"
    mkdir -p "$deb/DEBIAN"
    installed_size=$(du -s -k --apparent-size "$stage" | cut -f1)
    DEB_ARCH=$deb_arch INSTALLED_SIZE=$installed_size GLIBC=$glibc \
        perl -pe 's/\$\{(\w+)\}/$ENV{$1}/g' "$build/release/control" >"$deb/DEBIAN/control"
    (cd "$deb" && find usr -type f -print0 | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
    normalize "$deb/DEBIAN"
    dpkg-deb --root-owner-group -Zgzip -z9 --build "$deb" "$dist/redlock_${version}_$deb_arch.deb" >/dev/null

    # The .rpm: rpmbuild packs the same /usr tree; the macros make its bytes depend on
    # SOURCE_DATE_EPOCH alone (build time, host name, file times).
    rpm=$build/rpm
    mkdir -p "$rpm"
    rpmbuild -bb --quiet --target "$arch-linux" \
        --define "_topdir $rpm" --define "_rpmdir $rpm/out" \
        --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
        --define "redlock_stage $stage" --define "redlock_license $root/LICENSE" \
        --define "redlock_date $(date -u -d "@$SOURCE_DATE_EPOCH" '+%a %b %d %Y')" \
        --define "_buildhost reproducible" \
        --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" \
        --define "source_date_epoch_from_changelog 0" \
        --define "_binary_payload w9.gzdio" \
        --define "_binary_filedigest_algorithm 8" \
        "$build/release/redlock.spec" >"$rpm.log" 2>&1 || {
        cat "$rpm.log" >&2
        exit 1
    }
    cp "$rpm/out/redlock-$version-1.$arch.rpm" "$dist/"
done

(cd "$dist" && sha256sum -- *.tar.gz *.deb *.rpm >SHA256SUMS)
touch -d "@$SOURCE_DATE_EPOCH" "$dist"/*
echo "==== $dist ($((SECONDS - started)) s)"
(cd "$dist" && ls -l --time-style=+ -- * | awk '{print "  " $5, $NF}')
