#!/usr/bin/env bash
# Installs the Debian packages brokerchaos needs, skipping what is already there.
# Brokers are only installed: the project starts its own processes and never uses the
# packages' system services.
set -euo pipefail

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have_cmd ip            || need+=(iproute2)
have_cmd iptables      || need+=(iptables)
have_cmd nft           || need+=(nftables)
have_cmd ss            || need+=(iproute2)
have_cmd nats-server   || need+=(nats-server)
have_cmd redis-server  || need+=(redis-server)
have_cmd redis-sentinel || need+=(redis-sentinel)
have_cmd tc            || need+=(iproute2)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
have_cmd mosquitto     || need+=(mosquitto)
have_cmd ps            || need+=(procps)
[ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ] || need+=(openjdk-17-jre-headless)
# options.client java: the clients' bridges (systems/java/*.java) are compiled once
[ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/javac ] || need+=(openjdk-17-jdk-headless)
have_cmd mvn           || need+=(maven)  # fetches Kafka, ZooKeeper, Pulsar and BookKeeper jars, once
have_cmd chromium      || need+=(chromium)  # the report's browser test (make test)
have_cmd fusermount3   || need+=(fuse3)     # power-off: the data directories' lazy layer
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(libfaketime)  # the clock fault
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv python3-pip)
# the libraries the VerneMQ release links (../shared/vernemq): LevelDB's snappy, OpenSSL 3
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_lib libsnappy.so.1 || need+=(libsnappy1v5)
have_lib libcrypto.so.3 || need+=(libssl3)

if [ ${#need[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]} (run as root, or install them)" >&2
  exit 1
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Some machines auto-start services on install; ours must not be running.
for svc in nats-server redis-server redis-sentinel rabbitmq-server mosquitto epmd.socket epmd; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
    systemctl disable "$svc" >/dev/null 2>&1 || true
  fi
done
