#!/usr/bin/env bash
# Runs socket_producer and socket_consumer as two unrelated processes: this
# script starts both, and they share nothing but a socket path. The
# consumer sees the GPUs in the reverse order (on the simulator; on a real
# machine it keeps the caller's visibility), so every device it resolves
# has another ordinal there than in the producer.
#   run_socket_example.sh PRODUCER CONSUMER
set -uo pipefail
producer=$1 consumer=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
path=$dir/example.sock

"$producer" "$path" >"$dir/producer.log" 2>&1 &
ppid=$!
if [ "${CUCORE_DRIVER:-}" = sim ]; then
    n=${CUCORE_SIM_GPUS:-4}
    export CUDA_VISIBLE_DEVICES=$(seq $((n - 1)) -1 0 | paste -sd, -)
    want=$n
fi
"$consumer" "$path" >"$dir/consumer.log" 2>&1
crc=$?
wait $ppid
prc=$?
echo "== producer (exit $prc)"; cat "$dir/producer.log"
echo "== consumer (exit $crc)"; cat "$dir/consumer.log"
[ $prc -eq 0 ] && [ $crc -eq 0 ] || exit 1
# On the simulator the consumer sees every GPU: it must resolve them all.
if [ -n "${want:-}" ] && ! grep -q "consumer resolved $want of $want devices" "$dir/producer.log"; then
    echo "expected the consumer to resolve all $want devices" >&2
    exit 1
fi
