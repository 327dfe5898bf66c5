#!/usr/bin/env bash
# Runs socket_producer and socket_consumer as two unrelated processes: this
# script starts both, and they share nothing but a socket path. The
# consumer sees the producer's GPUs in the reverse order, named by UUID
# (the form that means the same GPUs whatever the caller's own visibility;
# on one GPU it is that GPU's UUID), so every device it resolves has
# another ordinal there than in the producer whenever there are two or more.
#   run_socket_example.sh [PRODUCER CONSUMER CUCORE_CLI]
# With no arguments it runs the programs built in build/ (scripts/test.sh,
# or cmake --build build): build/examples/socket_producer,
# build/examples/socket_consumer and build/tools/cucore. Without a CUDA
# driver (and CUCORE_DRIVER unset) it uses the simulated one, and says so.
# Passes when both exit 0 and their output shows the whole exchange: every
# device resolved, the pool imported on the producer's GPU, every buffer's
# bytes verified by the consumer, every lease ended.
set -uo pipefail
usage() {
    echo "usage: $0 [PRODUCER CONSUMER CUCORE_CLI]" >&2
    echo "  no arguments: build/examples/socket_producer build/examples/socket_consumer build/tools/cucore" >&2
}
case $# in
0)
    build=$(cd "$(dirname "$0")/.." && pwd)/build
    producer=$build/examples/socket_producer consumer=$build/examples/socket_consumer
    cli=$build/tools/cucore
    ;;
3) producer=$1 consumer=$2 cli=$3 ;;
*)
    if [ "$1" = -h ] || [ "$1" = --help ]; then
        usage
        exit 0
    fi
    echo "$0: wanted no arguments or three, got $#" >&2
    usage
    exit 2
    ;;
esac
for prog in "$producer" "$consumer" "$cli"; do
    if [ ! -x "$prog" ]; then
        echo "$0: $prog is not an executable program (build it: cmake --build build, or ./scripts/test.sh)" >&2
        usage
        exit 2
    fi
done
nbuf=3 # NBUFFERS in socket_producer.c
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
path=$dir/example.sock

# No CUDA driver and no choice made: the simulated driver, as `cucore demo`.
listed=$("$cli" devices --json 2>/dev/null) # exit 1 without a driver: read, not tested
if [ -z "${CUCORE_DRIVER:-}" ] && grep -q '"code":"CUC_E_NO_DRIVER"' <<<"$listed"; then
    echo "note: no CUDA driver here: using the simulated one (CUCORE_DRIVER=sim)"
    export CUCORE_DRIVER=sim
fi
# The UUIDs the producer will see (it runs with this environment), reversed.
uuids=$("$cli" devices --json | grep -o '"uuid":"GPU-[^"]*"' | cut -d'"' -f4) || {
    echo "cannot list the devices with $cli:" >&2
    "$cli" devices >&2
    exit 1
}
want=$(printf '%s\n' "$uuids" | wc -l)
consumer_cvd=$(printf '%s\n' "$uuids" | tac | paste -sd, -)

"$producer" "$path" >"$dir/producer.log" 2>&1 &
ppid=$!
CUDA_VISIBLE_DEVICES=$consumer_cvd "$consumer" "$path" >"$dir/consumer.log" 2>&1
crc=$?
wait $ppid
prc=$?
echo "== producer (exit $prc)"; cat "$dir/producer.log"
echo "== consumer (exit $crc)"; cat "$dir/consumer.log"
[ $prc -eq 0 ] && [ $crc -eq 0 ] || exit 1

status=0
expect() { # FILE TEXT
    if ! grep -qF -- "$2" "$1"; then
        echo "MISSING from $(basename "$1"): $2" >&2
        status=1
    fi
}
expect "$dir/consumer.log" "socket_consumer: CUDA_VISIBLE_DEVICES=$consumer_cvd"
expect "$dir/producer.log" "consumer resolved $want of $want devices"
expect "$dir/producer.log" "consumer imported the pool on our ordinal 0 = $(printf '%s\n' "$uuids" | head -1)"
expect "$dir/consumer.log" "socket_consumer: verified $nbuf of $nbuf buffers"
for ((b = 0; b < nbuf; b++)); do
    expect "$dir/consumer.log" "buffer $b: 256 KiB on our ordinal $((want - 1)): every byte as the producer wrote it"
done
expect "$dir/consumer.log" "socket_consumer: freed $nbuf buffers"
expect "$dir/producer.log" "$nbuf leases deferred the frees, 0 left after waiting for the consumer's releases"
expect "$dir/producer.log" "socket_producer OK"
expect "$dir/consumer.log" "socket_consumer OK"
exit $status
