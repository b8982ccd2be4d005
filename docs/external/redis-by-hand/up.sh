#!/bin/sh
# Start the three servers of this directory (each as its `start` hook does), then a sentinel
# beside each.
set -e
cd "$(dirname "$0")"
for n in n1 n2 n3; do
  mkdir -p $n; setsid redis-server $n.conf >> $n.log 2>&1 < /dev/null & echo $! > $n.pid
done
for s in s1 s2 s3; do
  setsid redis-server $s.conf --sentinel >> $s.log 2>&1 < /dev/null & echo $! > $s.pid
done
echo "started: $(cat n1.pid n2.pid n3.pid s1.pid s2.pid s3.pid | tr '\n' ' ')"
