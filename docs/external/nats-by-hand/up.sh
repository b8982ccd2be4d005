#!/bin/sh
# Start the three servers of this directory (the same command as each node's `start` hook).
set -e
cd "$(dirname "$0")"
for n in n1 n2 n3; do
  setsid nats-server -c $n.conf >> $n.log 2>&1 < /dev/null & echo $! > $n.pid
done
echo "started: $(cat n1.pid) $(cat n2.pid) $(cat n3.pid)"
