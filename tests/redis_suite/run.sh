#!/usr/bin/env bash
# Redis's own pub/sub tests (tests/unit/pubsub.tcl and pubsubshard.tcl of
# redis/redis at tag 7.0.15) against a bloomcast node, as Redis's harness
# starts its own server: a `src/redis-server` shim runs `bloomcast node` on
# the port of the config file the harness writes.
#
#   tests/redis_suite/run.sh /path/to/redis-7.0.15
#
# The checkout is not part of this repository (fetch it: the GitHub tarball
# of tag 7.0.15, or `git clone -b 7.0.15 https://github.com/redis/redis`);
# only its tests/ and runtest are used, copied into a scratch directory. Needs
# tclsh (Debian's tcl). Skipped, and why: the keyspace-notification tests
# need a keyspace (SET, EXPIRE, ...) and pubsubshard's replication block needs
# REPLICAOF; a bloomcast node has neither. Every other test runs.
set -euo pipefail
src=${1:?usage: $0 /path/to/redis-7.0.15 checkout}
here=$(cd "$(dirname "$0")/../.." && pwd)
node=${BLOOMCAST:-$here/.venv/bin/bloomcast}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/tests" "$src/runtest" "$work/"
mkdir "$work/src"
cat > "$work/src/redis-server" <<SHIM
#!/usr/bin/env bash
port=\$(awk '\$1=="port"{print \$2}' "\$1" | tail -1)
echo "bloomcast node for Redis's harness, PID: \$\$"
exec "$node" node --port "\$port" --bind 127.0.0.1 --no-bus --loglevel verbose 2>&1
SHIM
chmod +x "$work/src/redis-server"
cd "$work"
exec tclsh tests/test_helper.tcl --single unit/pubsub --single unit/pubsubshard --clients 1 \
    --skiptest "/^Keyspace notifications" --skiptest "/replication|on replica"
