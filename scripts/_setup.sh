# Shared by scripts/demo and scripts/test (sourced, not run): what a fresh Debian lacks.

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
apt_updated=""

apt_install() {
  echo "== installing Debian packages: $*"
  if [ -z "$apt_updated" ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The major version of the `java` on PATH (8 for "1.8.0_x", 17 for "17.0.15"), empty if none.
java_major() {
  command -v java >/dev/null 2>&1 || return 0
  java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9][0-9]*\).*/\2/p' | head -1
}

# Debian's default JRE when it is at least 17 (PySpark 4 needs 17+), else a named 17.
jre_package() {
  local major
  major=$(apt-cache policy default-jre-headless 2>/dev/null |
    sed -n 's/.*Candidate: \([0-9]*:\)\{0,1\}1\.\([0-9][0-9]*\).*/\2/p' | head -1)
  if [ -n "$major" ] && [ "$major" -ge 17 ]; then
    echo default-jre-headless
  else
    echo openjdk-17-jre-headless
  fi
}

# A virtualenv in .venv; Debian's python3 makes one only with python3-venv installed.
make_venv() {
  [ -x .venv/bin/python ] && return 0
  if ! python3 -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    apt_install python3-venv
    python3 -m venv .venv
  fi
}

# The project's distribution was named `ha` before (on the package index that name is another
# project, with a top-level package `ha` too): a .venv made then still holds it, and it would
# own the `ha` command and package beside ha-elector. Removed before ha-elector is installed,
# with the metadata its editable install left in the checkout (found there on the path entry).
drop_old_name() {
  if .venv/bin/python -m pip show -q ha >/dev/null 2>&1; then
    echo "== removing the distribution 'ha' (now named ha-elector)"
    .venv/bin/python -m pip uninstall -q -y ha
  fi
  rm -rf ha.egg-info
}
