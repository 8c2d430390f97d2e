#!/usr/bin/env bash
# Build policyd's OCI image from Debian packages and the checkout's wheel (`make image`).
#
#   1. base: a minimal Debian root filesystem (mmdebstrap --variant=essential --include=python3,
#      libstdc++6 for the C++ extensions of numpy and google-re2; no docs, man pages or locales), imported as the local image $BASE_IMAGE;
#   2. context: the policyd wheel built from this checkout (pip wheel --no-deps), the wheels of its
#      dependencies for the base's Python (pip download, binary only) and pip's own wheel;
#   3. image: deploy/Dockerfile built with `buildah bud` on that base and context, tagged
#      localhost/policyd:<version> in the local container storage (podman sees it) and written to
#      build/policyd-image.tar (oci-archive).
#
# Prints the image reference on the last line of stdout; progress goes to stderr. Idempotent:
# missing tools (mmdebstrap, buildah, podman, runc) are installed with apt-get; the base tarball
# and the .debs it was made from are cached; the image is rebuilt only when its build key (the
# wheel's RECORD, the Dockerfile and the base) changed.
#
# Environment:
#   POLICYD_IMAGE_CACHE    cache root (default: $HOME/.cache/policyd-image)
#   POLICYD_IMAGE_MIRROR   Debian mirror (default: the host's bookworm mirror in /etc/apt, else deb.debian.org)
#   POLICYD_IMAGE_ARCHIVE  the oci-archive to write (default: build/policyd-image.tar; empty: none)
set -euo pipefail
shopt -s inherit_errexit

readonly SUITE=bookworm
readonly PYTHON_VERSION=3.11          # bookworm's python3
readonly BASE_IMAGE=localhost/policyd-base:$SUITE
readonly ROOT=$(cd "$(dirname "$0")/.." && pwd)
readonly CACHE_ROOT=${POLICYD_IMAGE_CACHE:-$HOME/.cache/policyd-image}
readonly WORK=$ROOT/build/image
readonly ARCHIVE=${POLICYD_IMAGE_ARCHIVE-$ROOT/build/policyd-image.tar}
readonly KEY_LABEL=io.policyd.build-key

log() { printf 'image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}

ensure_tools() {
    local missing=() tool
    for tool in mmdebstrap buildah podman runc; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) && return 0
    log "apt-get install ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "${missing[@]}" >&2
}

# The first enabled bookworm 'deb' URI of the host's apt sources (deb822 or one-line format).
host_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e $f ]] || continue
        awk -v suite="$SUITE" '
            function flush() {
                if (!found && types ~ /deb/ && (" " suites " ") ~ (" " suite " ") && uris != "") { split(uris, u, " "); print u[1]; found = 1; exit }
                types = suites = uris = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
              if (key == "types") types = $0; else if (key == "suites") suites = $0; else if (key == "uris") uris = $0 }
            END { flush() }
        ' "$f" | grep . && return 0
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -e $f ]] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' | grep . && return 0
    done
    echo http://deb.debian.org/debian
}

# mmdebstrap's options; their hash names the cached base.
base_options() {
    printf '%s\n' --variant=essential --include=python3,libstdc++6 --format=tar \
        '--dpkgopt=path-exclude=/usr/share/doc/*' '--dpkgopt=path-exclude=/usr/share/man/*' \
        '--dpkgopt=path-exclude=/usr/share/locale/*' '--dpkgopt=path-exclude=/usr/share/info/*'
}

# The base root filesystem tarball (cached), its .debs kept in $CACHE_ROOT/debs for the next build.
base_tarball() {
    local mirror=${POLICYD_IMAGE_MIRROR:-$(host_mirror)} key tarball debs
    key=$( { base_options; echo "$SUITE $mirror"; } | sha256sum | cut -c1-16)
    tarball=$CACHE_ROOT/base-$SUITE-$key.tar
    debs=$CACHE_ROOT/debs
    if [[ ! -s $tarball ]]; then
        mkdir -p "$CACHE_ROOT" "$debs"
        log "mmdebstrap $SUITE (python3) from $mirror"
        local -a opts
        mapfile -t opts < <(base_options)
        mmdebstrap "${opts[@]}" --skip=download/empty \
            --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
            --setup-hook="sync-in $debs /var/cache/apt/archives/" \
            --customize-hook="sync-out /var/cache/apt/archives $debs" \
            --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
            "$SUITE" "$tarball.part" "$mirror" </dev/null >&2
        mv "$tarball.part" "$tarball"
    fi
    printf '%s\n' "$tarball"
}

label_of() {  # label_of IMAGE: the image's build-key label, empty if the image is absent
    podman image inspect --format "{{ index .Labels \"$KEY_LABEL\" }}" "$1" 2>/dev/null || true
}

import_base() {  # import_base TARBALL: $BASE_IMAGE from the tarball unless it is already that one
    local tarball=$1 key ctr
    key=$(basename "$tarball" .tar)
    [[ $(label_of "$BASE_IMAGE") == "$key" ]] && return 0
    log "importing $tarball as $BASE_IMAGE"
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$tarball" / >/dev/null
    buildah config --label "$KEY_LABEL=$key" --env PATH=/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/sh "$ctr"
    buildah commit --rm "$ctr" "$BASE_IMAGE" >&2
}

# build/image/context: wheels/ (policyd + dependencies for the base's Python) and tools/pip.whl.
make_context() {
    local python=${PYTHON:-python3} wheel
    rm -rf "$WORK/context"
    mkdir -p "$WORK/context/wheels" "$WORK/context/tools" "$WORK/pip"
    log "pip wheel --no-deps (the checkout)"
    "$python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/context/wheels" "$ROOT" >&2
    wheel=$(ls "$WORK/context/wheels"/policyd-*.whl)
    log "pip download (dependencies of $(basename "$wheel") for CPython $PYTHON_VERSION, manylinux x86_64)"
    "$python" -m pip download -q --disable-pip-version-check --only-binary=:all: \
        --python-version "$PYTHON_VERSION" --implementation cp --abi "cp${PYTHON_VERSION/./}" --abi abi3 --abi none \
        --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any \
        -d "$WORK/context/wheels" "$wheel" >&2
    "$python" -m pip download -q --disable-pip-version-check --only-binary=:all: --no-deps -d "$WORK/pip" pip >&2
    cp "$(ls "$WORK/pip"/pip-*.whl | sort -V | tail -n1)" "$WORK/context/tools/pip.whl"
}

wheel_record() {  # wheel_record WHEEL: its RECORD (every file's sha256), the same for the same sources
    "${PYTHON:-python3}" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
sys.stdout.write(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode())' "$1"
}

version() {
    sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/policyd/__init__.py"
}

main() {
    ensure_tools
    local version tarball base_key key image
    version=$(version)
    [[ -n $version ]] || die "no __version__ in policyd/__init__.py"
    image=localhost/policyd:$version
    tarball=$(base_tarball)
    import_base "$tarball"
    make_context
    base_key=$(label_of "$BASE_IMAGE")
    key=$( { wheel_record "$WORK"/context/wheels/policyd-*.whl; \
             cat "$ROOT/deploy/Dockerfile"; echo "$base_key"; } | sha256sum | cut -c1-16)
    if [[ $(label_of "$image") == "$key" ]]; then
        log "$image is up to date (build key $key)"
    else
        log "buildah bud -f deploy/Dockerfile -t $image"
        buildah bud --isolation chroot --layers=false --pull=never \
            --build-arg "BASE=$BASE_IMAGE" --build-arg "VERSION=$version" \
            --label "$KEY_LABEL=$key" --label "org.opencontainers.image.version=$version" \
            -f "$ROOT/deploy/Dockerfile" -t "$image" "$WORK/context" >&2
    fi
    if [[ -n $ARCHIVE ]]; then
        mkdir -p "$(dirname "$ARCHIVE")"
        rm -f "$ARCHIVE"
        podman save --format oci-archive -o "$ARCHIVE" "$image" >&2
        log "wrote $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
    fi
    log "$image: $(podman image inspect --format '{{.Size}}' "$image") bytes uncompressed"
    printf '%s\n' "$image"
}

main "$@"
