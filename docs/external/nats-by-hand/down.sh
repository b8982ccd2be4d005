#!/bin/sh
# Stop the servers this directory started (by the pids it kept), and forget their data.
cd "$(dirname "$0")"
for f in n1.pid n2.pid n3.pid; do
  [ -f $f ] && kill "$(cat $f)" 2>/dev/null
done
sleep 1
rm -rf n1 n2 n3 n1.pid n2.pid n3.pid
