#!/usr/bin/env bash
# Provide kube-apiserver and etcd (Kubernetes 1.20.2) for policyd's integration tests.
#
# Prints the directory holding both binaries on the last line of stdout; everything
# else goes to stderr. Idempotent: the first call on a fresh Debian machine installs
# the toolchain with apt and builds kube-apiserver and kube-scheduler from Debian's
# kubernetes source package (about 4-8 minutes on 2 cores); later calls are instant.
#
# Lookup order:
#   1. $KUBEBUILDER_ASSETS, if it holds kube-apiserver and etcd (envtest convention);
#   2. kube-apiserver and etcd on PATH (symlinked together under $CACHE_ROOT/path);
#   3. the cache, ${POLICYD_ENVTEST_CACHE:-$HOME/.cache/policyd-envtest}/1.20.2;
#   4. otherwise build into the cache (under a flock, so concurrent callers build once).
#
# Environment:
#   POLICYD_ENVTEST_CACHE       cache root (default: $HOME/.cache/policyd-envtest)
#   POLICYD_ENVTEST_KEEP_BUILD  if 1, keep the build tree ($CACHE_ROOT/build-1.20.2)
#   POLICYD_ENVTEST_NO_PATH     if 1, skip the PATH lookup (step 2)
set -euo pipefail

readonly K8S_VERSION=1.20.2
readonly CACHE_ROOT=${POLICYD_ENVTEST_CACHE:-$HOME/.cache/policyd-envtest}
readonly CACHE_DIR=$CACHE_ROOT/$K8S_VERSION
readonly SRC_LIST=/etc/apt/sources.list.d/policyd-envtest-src.sources
# Debian suites whose kubernetes source package is 1.20.2 (bookworm: 1.20.5+really1.20.2).
readonly FALLBACK_SUITES=(bookworm bullseye)

log() { printf 'envtest: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
has_bins() { [[ -n $1 && -x $1/kube-apiserver && -x $1/etcd ]]; }

# Run a command as root (directly, or through sudo when available).
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

apt_install() {
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2
}

# Print "URI SIGNED_BY" of the first enabled Debian 'deb' entry for suite $1 (SIGNED_BY may be empty).
debian_mirror_for() {
    local suite=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e $f && $f != "$SRC_LIST" ]] || continue
        # deb822: stanzas separated by blank lines.
        awk -v suite="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uris != "")
                    { split(uris, u, " "); print u[1], signed; found = 1; exit }
                types = suites = uris = signed = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
              if (key == "types") types = $0; else if (key == "suites") suites = $0
              else if (key == "uris") uris = $0; else if (key == "signed-by") signed = $0
              else if (key == "enabled") enabled = tolower($0) }
            END { if (!found) flush() }
        ' "$f" | head -n1 | grep . && return 0
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -e $f ]] || continue
        # one-line format: deb [opts] URI suite components...
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" \
            | awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }' | grep . && return 0
    done
    return 1
}

# Make 'apt-get source kubernetes' able to fetch a 1.20.2 source package; print its version.
ensure_kubernetes_source() {
    local codename version suite mirror signed tried=" "
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [[ -n $codename ]] || die "cannot read VERSION_CODENAME from /etc/os-release"
    version=$(kubernetes_src_version) && { echo "$version"; return 0; }
    for suite in "$codename" "${FALLBACK_SUITES[@]}"; do
        [[ $tried != *" $suite "* ]] || continue
        tried+="$suite "
        # The mirror is taken from the machine's own entry for its suite, and reused for other suites.
        read -r mirror signed < <(debian_mirror_for "$codename" || true) || true
        [[ -n ${mirror:-} ]] || mirror=http://deb.debian.org/debian
        log "adding deb-src $mirror $suite main ($SRC_LIST)"
        {
            echo "# Added by policyd scripts/envtest.sh to fetch the kubernetes source package."
            echo "Types: deb-src"
            echo "URIs: $mirror"
            echo "Suites: $suite"
            echo "Components: main"
            [[ -n ${signed:-} ]] && echo "Signed-By: $signed"
        } | as_root tee "$SRC_LIST" >/dev/null
        as_root apt-get update >&2
        version=$(kubernetes_src_version) && { echo "$version"; return 0; }
        log "suite $suite has no kubernetes $K8S_VERSION source package"
    done
    as_root rm -f "$SRC_LIST"
    die "no Debian suite with a kubernetes $K8S_VERSION source package found"
}

# Print the version of an available kubernetes source package that builds K8S_VERSION.
kubernetes_src_version() {
    apt-cache showsrc --only-source kubernetes 2>/dev/null \
        | awk '/^Version:/ { print $2 }' \
        | grep -E "(^|[^0-9.])${K8S_VERSION//./\\.}(-|$)" | head -n1 | grep .
}

build() {
    local work=$CACHE_ROOT/build-$K8S_VERSION version src start
    start=$(date +%s)
    as_root apt-get update >&2
    apt_install etcd-server golang-go rsync jq dpkg-dev make openssl ca-certificates
    version=$(ensure_kubernetes_source)
    log "building kube-apiserver and kube-scheduler from Debian kubernetes $version in $work"
    rm -rf "$work"
    mkdir -p "$work"
    (cd "$work" && apt-get source --only-source "kubernetes=$version" >&2)
    src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
    [[ -n $src && -f $src/debian/rules ]] || die "apt-get source did not unpack kubernetes into $work"

    # As debian/rules does: GOPATH with a k8s.io/kubernetes symlink, CGO off, 'make WHAT=...'.
    # hack/lib/init.sh forces GO111MODULE=off (GOPATH mode over vendor/), so no -mod flag here.
    mkdir -p "$src/.go/src/k8s.io" "$work/home"
    [[ -L $src/.go/src/k8s.io/kubernetes ]] || ln -s ../../.. "$src/.go/src/k8s.io/kubernetes"
    # hack/lib/golang.sh strips (-s -w) only when GOLDFLAGS is unset.
    local -a goldflags=(--unset=GOLDFLAGS)
    # Go >= 1.23 rejects the vendored reflect2's go:linkname pulls unless told not to check
    # (untested: bookworm ships Go 1.19, which builds this tree as is).
    if go version | grep -Eq 'go1\.(2[3-9]|[3-9][0-9])'; then goldflags=("GOLDFLAGS=-s -w -checklinkname=0"); fi
    log "$(go version)"
    (
        cd "$src"
        env "${goldflags[@]}" GOPATH="$src/.go" HOME="$work/home" CGO_ENABLED=0 GOPROXY=off GOFLAGS= \
            GOTOOLCHAIN=local GOMAXPROCS="$(nproc)" PATH="/usr/lib/go/bin:$PATH" \
            make WHAT="cmd/kube-apiserver cmd/kube-scheduler" >&2
    )

    local stage=$CACHE_DIR.tmp.$$
    rm -rf "$stage"
    mkdir -p "$stage"
    install -m 0755 "$src/_output/bin/kube-apiserver" "$src/_output/bin/kube-scheduler" "$stage/"
    install -m 0755 "$(command -v etcd || echo /usr/bin/etcd)" "$stage/etcd"
    {
        echo "kubernetes source package: $version"
        echo "go: $(go version)"
        echo "etcd: $("$stage/etcd" --version | head -n1)"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - start))s"
    } >"$stage/BUILD-INFO"
    rm -rf "$CACHE_DIR"
    mv "$stage" "$CACHE_DIR"
    [[ ${POLICYD_ENVTEST_KEEP_BUILD:-0} == 1 ]] || rm -rf "$work"
    log "built in $(($(date +%s) - start))s: $CACHE_DIR"
}

main() {
    if has_bins "${KUBEBUILDER_ASSETS:-}"; then
        log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
        echo "$KUBEBUILDER_ASSETS"
        return
    fi
    local apiserver etcd
    apiserver=$(command -v kube-apiserver || true)
    etcd=$(command -v etcd || true)
    if [[ ${POLICYD_ENVTEST_NO_PATH:-0} != 1 && -n $apiserver && -n $etcd ]]; then
        local dir
        dir=$(dirname "$apiserver")
        if [[ $(dirname "$etcd") != "$dir" ]]; then
            dir=$CACHE_ROOT/path
            mkdir -p "$dir"
            ln -sfn "$apiserver" "$dir/kube-apiserver"
            ln -sfn "$etcd" "$dir/etcd"
        fi
        log "using binaries from PATH: $apiserver ($("$apiserver" --version 2>/dev/null || true)), $etcd"
        echo "$dir"
        return
    fi
    if has_bins "$CACHE_DIR"; then
        log "using cache $CACHE_DIR"
        echo "$CACHE_DIR"
        return
    fi
    mkdir -p "$CACHE_ROOT"
    exec 9>"$CACHE_ROOT/.lock"
    if ! flock -n 9; then
        log "another envtest.sh is building; waiting for $CACHE_ROOT/.lock"
        flock 9
    fi
    if ! has_bins "$CACHE_DIR"; then
        build
    fi
    log "using cache $CACHE_DIR"
    echo "$CACHE_DIR"
}

main "$@"
