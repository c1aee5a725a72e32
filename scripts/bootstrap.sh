#!/usr/bin/env bash
# Everything ualdbg needs on a fresh Debian 12 machine of this project's kind: Debian packages
# (apt, as root, only those missing), a virtualenv made from the Python that gdb embeds
# (/usr/bin/python3, PLATFORM.md), and the example programs.
#
#   scripts/bootstrap.sh --demo            what `make demo` uses: gdb, gcc, the venv, one example
#   scripts/bootstrap.sh                   what `make test` uses: also lldb, qemu-user, the cross
#                                          compilers, 32-bit libgcc, gfortran; all the examples
#   scripts/bootstrap.sh --list-packages [--demo]
#                                          the Debian packages a fresh machine needs, one a line
#   scripts/bootstrap.sh --check-packages  prove that list installable as a whole (apt-get -s),
#                                          whatever this machine already has; fails on a
#                                          conflict or a removal (CI runs it on every run)
#   scripts/bootstrap.sh --check-packages --with PKG
#                                          the same with PKG added: try a package before listing it
#
# The two lists below are the one source of truth: the install, --list-packages and
# --check-packages all read them.
set -euo pipefail
cd "$(dirname "$0")/.."

DEMO_PACKAGES=(gdb gcc libc6-dev make python3-venv)
# Not gcc-multilib: Debian 12's gcc-multilib conflicts with every gcc-12-<cross> package below,
# so a list holding both can never install. lib32gcc-12-dev + libc6-dev-i386 give `gcc -m32`
# (examples/stack_double_m32) beside the cross compilers.
TEST_PACKAGES=(
  g++ gfortran sqlite3 curl xz-utils
  libc6-dbg    # libc's own functions by name (its local symbols live in the debug file), as gdb names them
  lldb-19 python3-lldb-19 liblldb-19-dev    # the last gives the liblldb.so that `import lldb` needs
  lib32gcc-12-dev libc6-dev-i386
  gdb-multiarch
  gcc-sparc64-linux-gnu gcc-alpha-linux-gnu gcc-hppa-linux-gnu gcc-sh4-linux-gnu gcc-aarch64-linux-gnu
  libc6-dev-sparc64-cross libc6.1-dev-alpha-cross libc6-dev-hppa-cross libc6-dev-sh4-cross libc6-dev-arm64-cross
  gcc-arm-linux-gnueabihf gcc-arm-linux-gnueabi gcc-mips-linux-gnu gcc-mipsel-linux-gnu gcc-riscv64-linux-gnu
  libc6-dev-armhf-cross libc6-dev-armel-cross libc6-dev-mips-cross libc6-dev-mipsel-cross libc6-dev-riscv64-cross
  gcc-mips64el-linux-gnuabi64 libc6-dev-mips64el-cross    # MIPS64 n64 (tests/cross/test_cross_mips64el.py)
  # qemu-user 9 or newer: its gdb stub serves the signal's siginfo ($_siginfo), which Debian 12's
  # qemu 7.2 lacks; bookworm-backports has qemu 10 (static binaries).
  qemu-user/bookworm-backports
)
# Cross architectures whose examples the test set-up builds (examples/Makefile `cross ARCH=`).
CROSS_EXAMPLES=(sparc64 alpha hppa sh4)

mode=test
action=install
with=()
while [ $# -gt 0 ]; do
  case "$1" in
    --demo) mode=demo ;;
    --list-packages) action=list ;;
    --check-packages) action=check ;;
    --with) [ $# -ge 2 ] || { echo "bootstrap: --with needs a package name" >&2; exit 2; }; with+=("$2"); shift ;;
    *) echo "bootstrap: unknown option $1 (--demo, --list-packages, --check-packages [--with PKG])" >&2; exit 2 ;;
  esac
  shift
done

packages() {
  # The list without the comments bash already dropped; the demo's packages come first.
  printf '%s\n' "${DEMO_PACKAGES[@]}"
  [ "$mode" = demo ] || printf '%s\n' "${TEST_PACKAGES[@]}"
}

have_backports_source() {
  grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d
}

add_backports_source() {
  have_backports_source && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: qemu-user comes from bookworm-backports, which apt does not know here; run as root to add it" >&2
    exit 2
  fi
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    > /etc/apt/sources.list.d/bookworm-backports.sources
}

# Is one entry of the list installed (for qemu-user: at version 9 or newer)?
installed() {
  local name=${1%%/*} version
  version=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  case "$version" in
    "install ok installed "*) ;;
    *) return 1 ;;
  esac
  if [ "$name" = qemu-user ]; then
    version=${version#install ok installed }
    version=${version#*:}  # the epoch
    [ "${version%%.*}" -ge 9 ] 2>/dev/null || return 1
  fi
}

if [ "$action" = list ]; then
  packages
  exit 0
fi

if [ "$action" = check ]; then
  # Simulate installing the WHOLE list, installed or not: a machine that already holds every
  # package must still fail here when two of them conflict (issue 16: gcc-multilib).
  mode=test
  add_backports_source
  [ "$(id -u)" != 0 ] || apt-get update -qq >/dev/null
  mapfile -t all < <(packages)
  all+=("${with[@]}")
  out=$(apt-get install -s --no-install-recommends "${all[@]}" 2>&1) || {
    printf '%s\n' "$out" | grep -E '^(E:|W:| )' >&2 || true
    echo "bootstrap: apt cannot install the package list as a whole (${#all[@]} packages): see above" >&2
    exit 1
  }
  removals=$(printf '%s\n' "$out" | grep -c '^Remv ' || true)
  if [ "$removals" != 0 ]; then
    printf '%s\n' "$out" | grep '^Remv ' >&2
    echo "bootstrap: installing the package list would remove $removals package(s)" >&2
    exit 1
  fi
  echo "bootstrap: the package list resolves as a whole: ${#all[@]} packages, $(printf '%s\n' "$out" | grep -c '^Inst ' || true) to install on this machine, no conflict, no removal"
  exit 0
fi

mapfile -t all < <(packages)
need=()
for p in "${all[@]}"; do installed "$p" || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing Debian packages: ${need[*]}; install them as root (sudo $0${mode/test/}) and run again" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  case " ${need[*]} " in *" qemu-user/bookworm-backports "*) add_backports_source ;; esac
  echo "bootstrap: installing ${need[*]}"
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ "$mode" = test ]; then
  # SH4: Debian 12's sh4 glibc (2.36-8cross1) cannot start a program: a static one loops forever
  # in __libc_start_main (a `bf.s` to itself), a dynamic one's loader dies of SIGSEGV, under
  # qemu-sh4 7.2 and 10 alike. Debian 13's (2.41) works: its three cross packages (architecture
  # `all`, no other dependencies) replace them, from Debian's own archive.
  sh4_libc=$(dpkg-query -W -f='${Version}' libc6-sh4-cross 2>/dev/null || true)
  case "$sh4_libc" in
    2.36-*)
      if [ "$(id -u)" = 0 ]; then
        echo "bootstrap: replacing Debian 12's sh4 glibc $sh4_libc (it cannot start programs) with Debian 13's"
        tmp=$(mktemp -d)
        curl -sSfL http://deb.debian.org/debian/dists/trixie/main/binary-all/Packages.xz | xz -dc \
          | awk '/^Package: (libc6|libc6-dev|linux-libc-dev)-sh4-cross$/{p=1} p&&/^Filename:/{print $2; p=0}' \
          | while read -r f; do curl -sSfL -o "$tmp/$(basename "$f")" "http://deb.debian.org/debian/$f"; done
        dpkg -i "$tmp"/*.deb >/dev/null
        rm -rf "$tmp"
      else
        echo "bootstrap: Debian 12's sh4 glibc $sh4_libc cannot start programs; run as root to replace it with Debian 13's" >&2
        exit 2
      fi
      ;;
  esac
fi

# The venv: the demo needs only ualdbg's own dependencies; the tests add pytest, ruff, mypy...
# Installed editable as a path in a .pth file (setuptools' "compat" mode): its default for this
# layout is an import hook that every Python start of the venv imports with pathlib and
# importlib.util, a fifth of `ualdbg trace -- /bin/true` (issue 34). (The stamp's name changed
# with the mode: a venv installed the other way is installed again.)
extra=$([ "$mode" = test ] && echo '[test]' || true)
stamp=.venv/.installed-$mode-pth
if [ ! -x .venv/bin/python ] || [ ! -e "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  [ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat -e ".$extra"
  touch "$stamp"
fi

if [ "$mode" = demo ]; then
  make -s -C examples build/not_aligned >/dev/null
else
  make -s -C examples >/dev/null
  for arch in "${CROSS_EXAMPLES[@]}"; do make -s -C examples cross ARCH="$arch" >/dev/null; done
fi
