#!/bin/sh
# The console's browser test needs Debian's chromium and chromium-driver. `make test` runs this:
# it installs them when they are missing and it runs as root on Debian/Ubuntu; otherwise it only
# says so, and the browser test skips naming the missing package.
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: chromium/chromium-driver missing and not root on Debian/Ubuntu: the console browser test will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null 2>&1; }; then
    echo "ensure_chromium: installed chromium and chromium-driver" >&2
else
    echo "ensure_chromium: could not install chromium/chromium-driver: the console browser test will skip" >&2
fi
exit 0
