#!/usr/bin/env bash
# Make sure Debian's Chromium is installed: the audit page and /ui tests render pages in it headless.
#
#   deploy/browser/ensure-chromium.sh     nothing to do when `chromium` is on PATH; else apt-get install it
#
# `make test` runs this first, so a fresh machine of the project's kind needs nothing installed by hand.
# Installing needs root (or password-less sudo); without either it stops and says what to run.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "ensure-chromium: Chromium is missing and this user cannot install packages;" >&2
    echo "  run as root: apt-get install -y --no-install-recommends chromium" >&2
    exit 1
fi
echo "ensure-chromium: installing Debian's chromium (headless browser for the page tests)" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "ensure-chromium: apt-get ran but chromium is not on PATH" >&2; exit 1; }
