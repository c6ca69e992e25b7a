#!/bin/sh
# Debian packages some tests drive as real programs: chromium and chromium-driver (the console's
# browser test), redis-server (the Redis state store), haproxy (a fleet behind a load balancer),
# mosquitto with the headers and libcrypto its vixio plugin is compiled against (an external MQTT broker).
# `make test` runs this: it installs the missing ones when it runs as root on Debian/Ubuntu;
# otherwise it only says so, and those tests skip naming the missing package.
missing=""
for pair in chromium:/usr/bin/chromium chromium-driver:/usr/bin/chromedriver \
            redis-server:/usr/bin/redis-server haproxy:/usr/sbin/haproxy mosquitto:/usr/sbin/mosquitto \
            mosquitto-dev:/usr/include/mosquitto_broker.h libmosquitto-dev:/usr/include/mosquitto.h \
            libssl-dev:/usr/include/openssl/hmac.h gcc:/usr/bin/cc; do
    package=${pair%%:*}
    binary=${pair#*:}
    [ -e "$binary" ] || missing="$missing $package"
done
if [ -z "$missing" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_test_packages:$missing missing and not root on Debian/Ubuntu: the tests that need them will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # one word per package
if apt-get install -y --no-install-recommends $missing >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends $missing >/dev/null 2>&1; }; then
    echo "ensure_test_packages: installed$missing" >&2
else
    echo "ensure_test_packages: could not install$missing: the tests that need them will skip" >&2
fi
exit 0
