o=$TRDMA_LAB_OUT
echo "lru_gen before: $(cat /sys/kernel/mm/lru_gen/enabled)"; echo n > /sys/kernel/mm/lru_gen/enabled; echo "lru_gen now: $(cat /sys/kernel/mm/lru_gen/enabled)"
( while :; do echo "=== $(cut -d' ' -f1 /proc/uptime) $(grep -E '^MemAvailable' /proc/meminfo)"; top -b -H -n 1 -w 160 | sed -n 7,18p; sleep 4; done ) > $o/top.log 2>&1 &
rdma link add trdma0 type trdma netdev $TRDMA_LAB_IF && $1/tests/lab/trdma_lab_tests --gtest_filter=-Limits.*:FaultTest.Soak > /tmp/g.log 2>&1; rc=$?
cp /tmp/g.log "$o/g.log"
grep -E "memory:|FAILED|PASSED|hog" /tmp/g.log | head -20; echo "gtest rc $rc"
dmesg | grep -E "soft lockup|unstable|BUG|WARNING" | head
