#!/bin/sh
# Install Debian packages that tests need, where apt exists: as root, or through sudo. Never
# fails: without apt, root or sudo it says what to install (the tests that need the packages
# skip, and fail under CI=true).
# Usage: sh .ci/apt-install.sh NAME PACKAGE...   (NAME prefixes the messages)
set -u
name=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$name: apt-get not found; install $* (or their equivalents)."
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "$name: not root and no sudo; run: apt-get install -y $*"
        exit 0
    fi
fi
echo "$name: installing $*"
$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null \
    || echo "$name: apt-get failed; the tests that need $* will not find them."
