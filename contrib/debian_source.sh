# Sourced by newer_git.sh and newer_python.sh: builds an upstream release
# into the cache once, from the source tarball Debian's archive carries
# (checked by its sha256 first), installing the Debian packages the build
# needs when they are missing.

cache=${VCSPERF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vcsperf}

# missing_packages WHAT:PACKAGE ...: the packages whose command (a name) or
# file (an absolute path) is absent, besides those every build needs.
missing_packages() {
    for need in curl:curl make:make cc:gcc xz:xz-utils "$@"; do
        what=${need%%:*}
        case $what in
            /*) [ -e "$what" ] ;;
            *) command -v "$what" >/dev/null 2>&1 ;;
        esac || printf '%s ' "${need#*:}"
    done
}

# build_once PREFIX SHA256 URL TOP NEEDS COMMAND: unless PREFIX holds a
# finished build, fetches URL, checks it, unpacks it and runs COMMAND (a
# shell command) in its folder TOP to install into PREFIX; NEEDS is a list
# of WHAT:PACKAGE for missing_packages.  A failed build prints the end of
# its log and stops the script.
build_once() {
    prefix=$1 sha256=$2 url=$3 top=$4 needs=$5 command=$6
    [ -e "$prefix/.complete" ] && return 0
    # shellcheck disable=SC2086
    packages=$(missing_packages $needs)
    if [ -n "$packages" ]; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null
    fi
    mkdir -p "$cache"
    rm -rf "$prefix"
    work=$(mktemp -d "$cache/build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    curl -fsS -o "$work/src.tar.xz" "$url"
    echo "$sha256  $work/src.tar.xz" | sha256sum -c --quiet
    tar -C "$work" -xf "$work/src.tar.xz"
    if ! (cd "$work/$top" && eval "$command") >"$work/build.log" 2>&1; then
        tail -30 "$work/build.log" >&2
        echo "abort: building $top failed (log above)" >&2
        exit 1
    fi
}
