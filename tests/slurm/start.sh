#!/bin/bash
# start.sh - start a throw-away, multi-"node" Slurm 22.05 cluster on ONE Debian 12
# machine, as root, entirely under $SBX_DIR (required, e.g. SBX_DIR=$(mktemp -d)).
#
#   SBX_MODE=loopback (default)  every slurmd on 127.0.0.1, distinct ports
#   SBX_MODE=netns               slurmctld in netns <name>-hub (bridge br0,
#                                  $SBX_SUBNET.1), slurmd nX in netns <name>-nX
#                                  ($SBX_SUBNET.(10+X)), veth pairs, no address
#                                  or route is added to the root namespace
#
# Each slurmd runs in the foreground (-D) under a tiny init shell that is PID 1
# of a private PID + mount namespace; with SBX_UTS=1 (default) also in a private
# UTS namespace (hostname nX) with a bind-mounted hosts file. slurmstepd and all
# job tasks of node nX live in that PID namespace, so stop.sh ends a node, and
# every leftover step on it, by ending the namespace's init process. It never
# searches the process table and never kills by name.
#
# Nothing is installed in /etc, no systemd unit is used, munged runs with its
# own key and socket. Use  $SBX_DIR/bin/sbx <cmd>  (or: . $SBX_DIR/env.sh) to
# talk to the cluster; stop with stop.sh.
set -euo pipefail

SBX_DIR=${SBX_DIR:?set SBX_DIR to a scratch directory, e.g. SBX_DIR=\$(mktemp -d)}
SBX_NAME=${SBX_NAME:-merak}               # prefix of netns names / ClusterName
SBX_MODE=${SBX_MODE:-loopback}          # loopback | netns
SBX_NODES=${SBX_NODES:-2}               # number of slurmd "nodes" n1..nN
SBX_CPUS=${SBX_CPUS:-16}                # CPUs each node claims (config_overrides)
SBX_GPUS=${SBX_GPUS:-8}                 # fake GPUs per node (0 = no GRES)
SBX_MEM=${SBX_MEM:-16000}               # RealMemory (MB) each node claims
SBX_PORT=${SBX_PORT:-36817}             # slurmctld port; slurmd ports follow
SBX_SUBNET=${SBX_SUBNET:-198.18.0}      # netns mode: /24 from RFC 2544 test range
SBX_UTS=${SBX_UTS:-1}                   # 1: each slurmd gets own hostname + hosts file
SBX_TASK_PLUGIN=${SBX_TASK_PLUGIN:-task/none}
SBX_MPI_DEFAULT=${SBX_MPI_DEFAULT:-none}
SBX_PLUGSTACK=${SBX_PLUGSTACK:-}        # plugstack.conf content (lines)
SBX_DEBUG=${SBX_DEBUG:-info}            # SlurmctldDebug / SlurmdDebug

t0=$EPOCHREALTIME
log() { awk -v a="$t0" -v b="$EPOCHREALTIME" -v m="$*" 'BEGIN{printf "[sbx %6.2fs] %s\n", b-a, m}'; }
die() { echo "start.sh: $*" >&2; exit 1; }
# alive PID: exists and is not a zombie
alive() { local s; s=$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }

[ "$(id -u)" = 0 ] || die "must run as root"
case "$SBX_MODE" in loopback|netns) ;; *) die "SBX_MODE must be loopback or netns";; esac
for b in slurmctld slurmd munged mungekey srun nsenter unshare setsid ip ss awk; do
	command -v "$b" >/dev/null || die "missing $b (run scripts/install-deps.sh)"
done
for f in "$SBX_DIR"/run/*.pid "$SBX_DIR"/munge/munged.pid; do
	[ -f "$f" ] && alive "$(cat "$f")" && die "already running ($f); run stop.sh"
done
if [ "$SBX_MODE" = loopback ]; then
	for p in $(seq "$SBX_PORT" $((SBX_PORT + SBX_NODES))); do
		ss -Htln "sport = :$p" | grep -q . && die "port $p already in use"
	done
fi

H=$(hostname -s)
R=$SBX_DIR
mkdir -p "$R"/{etc,log,run,state,munge,bin}
chmod 755 "$R" "$R/munge"
: > "$R/run/netns"     # list of the netns start.sh creates (for stop.sh)

# --- munge: private key + socket --------------------------------------------
[ -f "$R/munge/munge.key" ] || mungekey -c -k "$R/munge/munge.key"
chmod 600 "$R/munge/munge.key"
MSOCK=$R/munge/munge.socket.2

# --- per-node dirs, fake GPU device nodes -----------------------------------
GRES_LINE=""
[ "$SBX_GPUS" -gt 0 ] && GRES_LINE="Gres=gpu:$SBX_GPUS"
: > "$R/etc/gres.conf.new"
echo "AutoDetect=off" >> "$R/etc/gres.conf.new"
for i in $(seq 1 "$SBX_NODES"); do
	n=n$i
	mkdir -p "$R/spool/$n" "$R/nodetmp/$n" "$R/dev/$n"
	chmod 1777 "$R/nodetmp/$n"
	if [ "$SBX_GPUS" -gt 0 ]; then
		for g in $(seq 0 $((SBX_GPUS - 1))); do
			# slurmd requires File= to be a char/block device: clone /dev/null (1,3)
			[ -c "$R/dev/$n/gpu$g" ] || mknod "$R/dev/$n/gpu$g" c 1 3
		done
		echo "NodeName=$n Name=gpu File=$R/dev/$n/gpu[0-$((SBX_GPUS - 1))]" >> "$R/etc/gres.conf.new"
	fi
done
mv "$R/etc/gres.conf.new" "$R/etc/gres.conf"

# --- addresses ----------------------------------------------------------------
if [ "$SBX_MODE" = netns ]; then
	CTLD_ADDR=$SBX_SUBNET.1
	COMM=""          # bind INADDR_ANY, but only inside the private namespaces
else
	CTLD_ADDR=127.0.0.1
	COMM="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"  # bind 127.0.0.1 only
fi
node_addr() { if [ "$SBX_MODE" = netns ]; then echo "$SBX_SUBNET.$((10 + $1))"; else echo 127.0.0.1; fi; }
node_port() { if [ "$SBX_MODE" = netns ]; then echo $((SBX_PORT + 1)); else echo $((SBX_PORT + $1)); fi; }

# --- slurm.conf -----------------------------------------------------------------
# SlurmdPidFile: slurmd writes the PID it sees inside its PID namespace there;
# stop.sh does not use it (it uses run/node-nX.pid written below).
cat > "$R/etc/slurm.conf" <<EOF
# generated by start.sh ($SBX_MODE mode, $SBX_NODES nodes)
ClusterName=$SBX_NAME
SlurmctldHost=$H($CTLD_ADDR)
SlurmctldPort=$SBX_PORT
SlurmdPort=$((SBX_PORT + 1))
SrunPortRange=$((SBX_PORT + 100))-$((SBX_PORT + 199))
$COMM
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
TmpFS=$R/nodetmp/%n
SlurmctldPidFile=$R/run/slurmctld.pid
SlurmdPidFile=$R/spool/%n/slurmd.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd-%n.log
SlurmctldDebug=$SBX_DEBUG
SlurmdDebug=$SBX_DEBUG
PlugStackConfig=$R/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=$SBX_TASK_PLUGIN
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=$SBX_MPI_DEFAULT
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=30
EOF
for i in $(seq 1 "$SBX_NODES"); do
	echo "NodeName=n$i NodeHostname=n$i NodeAddr=$(node_addr "$i") Port=$(node_port "$i") CPUs=$SBX_CPUS RealMemory=$SBX_MEM $GRES_LINE State=UNKNOWN" >> "$R/etc/slurm.conf"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >> "$R/etc/slurm.conf"
# hosts file as seen by the slurmds (bind-mounted over /etc/hosts in their private mount ns)
{
	echo "127.0.0.1 localhost"
	echo "::1 localhost ip6-localhost ip6-loopback"
	echo "$CTLD_ADDR $H"
	for i in $(seq 1 "$SBX_NODES"); do echo "$(node_addr "$i") n$i"; done
} > "$R/etc/hosts"
# Name resolution inside the sandbox is this hosts file and nothing else:
# every process of the cluster (slurmctld, each slurmd with its steps and
# tasks, and each client command bin/sbx runs) has a private mount
# namespace where $R/etc/hosts is /etc/hosts and $R/etc/nsswitch.conf,
# whose hosts line is "files" alone, is /etc/nsswitch.conf.  No lookup of
# a name or an address ever waits on a DNS server: on a CI machine whose
# resolver did not answer from the namespaces, slurmctld's reverse lookups
# and slurmd n1's replies ran past MessageTimeout ("Unable to get address:
# Temporary failure in name resolution", node n1 not responding) and a job
# step never started.
[ -f /etc/nsswitch.conf ] || die "no /etc/nsswitch.conf to stand in for"
sed -E 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf > "$R/etc/nsswitch.conf"
grep -q '^hosts: files$' "$R/etc/nsswitch.conf" || echo "hosts: files" >> "$R/etc/nsswitch.conf"
# plugstack.conf is re-read by srun/sbatch and by every slurmstepd: editing it
# (or replacing the .so with mv) takes effect on the next job without restart.
printf '%s\n' "$SBX_PLUGSTACK" > "$R/etc/plugstack.conf"
export SLURM_CONF=$R/etc/slurm.conf

# --- network namespaces -------------------------------------------------------
if [ "$SBX_MODE" = netns ]; then
	hub=$SBX_NAME-hub
	for ns in "$hub" $(seq -f "$SBX_NAME-n%g" 1 "$SBX_NODES"); do
		[ -e "/run/netns/$ns" ] && die "netns $ns already exists (another sandbox? set SBX_NAME)"
	done
	ip netns add "$hub"; echo "$hub" >> "$R/run/netns"
	ip -n "$hub" link set lo up
	ip -n "$hub" link add br0 type bridge
	ip -n "$hub" addr add "$SBX_SUBNET.1/24" dev br0
	ip -n "$hub" link set br0 up
	for i in $(seq 1 "$SBX_NODES"); do
		ns=$SBX_NAME-n$i
		ip netns add "$ns"; echo "$ns" >> "$R/run/netns"
		ip -n "$ns" link set lo up
		ip -n "$hub" link add "vn$i" type veth peer name eth0 netns "$ns"
		ip -n "$hub" link set "vn$i" master br0 up
		ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
		ip -n "$ns" link set eth0 up
	done
	# A default route onto the bridge, where no router answers: a packet to
	# any address outside the sandbox (a DNS server's, say) waits for a
	# neighbour that never comes instead of failing at once, as on a
	# machine whose resolver is slow.  Nothing of the cluster may need one.
	for ns in $(cat "$R/run/netns"); do
		dev=eth0; [ "$ns" = "$hub" ] && dev=br0
		ip -n "$ns" route add default dev "$dev"
	done
	log "netns: $(tr '\n' ' ' < "$R/run/netns")"
fi

# --- client wrapper -------------------------------------------------------------
cat > "$R/env.sh" <<EOF
export SLURM_CONF=$R/etc/slurm.conf
export SBX_DIR=$R SBX_MODE=$SBX_MODE SBX_NAME=$SBX_NAME
EOF
# Each command in the hub's network namespace (netns mode) and a mount
# namespace of its own with the sandbox's hosts file and nsswitch.conf
# (above); slurmctld is started through it too.  nsenter, not "ip netns
# exec": that remounts /sys, which hides /sys/fs/cgroup (slurmd 22.05 then
# dies with "Unable to initialize cgroup plugin").  nsenter, unshare and sh
# exec each other, so the command keeps sbx's PID (timeout's signal
# reaches it).
{
	echo '#!/bin/bash'
	echo "# run a command as a client of the $SBX_NAME sandbox cluster"
	echo "export SLURM_CONF=$R/etc/slurm.conf"
	if [ "$SBX_MODE" = netns ]; then
		printf 'exec nsenter --net=/run/netns/%s -- ' "$SBX_NAME-hub"
	else
		printf 'exec '
	fi
	printf 'unshare --mount --propagation private -- sh -c '\''mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/nsswitch.conf || exit 1; shift 2; exec "$@"'\'' sbx %s %s "$@"\n' "$R/etc/hosts" "$R/etc/nsswitch.conf"
} > "$R/bin/sbx"
chmod 755 "$R/bin/sbx"

# --- munged -----------------------------------------------------------------------
rm -f "$R/munge/munged.pid" "$R"/run/*.pid "$R"/run/*.pidns
munged --key-file="$R/munge/munge.key" --socket="$MSOCK" \
	--pid-file="$R/munge/munged.pid" --seed-file="$R/munge/munged.seed" \
	--log-file="$R/log/munged.log"
for _ in $(seq 50); do [ -S "$MSOCK" ] && break; sleep 0.1; done
munge -S "$MSOCK" -n | unmunge -S "$MSOCK" >/dev/null || die "munge self-test failed"
log "munged pid $(cat "$R/munge/munged.pid")"

# --- slurmctld ----------------------------------------------------------------------
"$R/bin/sbx" slurmctld -c -f "$SLURM_CONF"
for _ in $(seq 100); do
	"$R/bin/sbx" scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1
done
"$R/bin/sbx" scontrol ping | grep -q 'is UP' || die "slurmctld not up, see $R/log/slurmctld.log"
log "slurmctld pid $(cat "$R/run/slurmctld.pid")"

# --- slurmd per node ----------------------------------------------------------------
# Init of the node's PID namespace: the sandbox's hosts file and
# nsswitch.conf (above), its hostname when UTS is 1, start
# slurmd -D as its child, forward SIGTERM/SIGINT/SIGHUP to it, reap orphans
# (slurmstepd is re-parented to this init) and exit when slurmd exits. When the
# init exits, the kernel kills every remaining process of the namespace.
# shellcheck disable=SC2016
NODE_INIT='
n=$1 uts=$2 hosts=$3 nss=$4; shift 4
mount --bind "$hosts" /etc/hosts && mount --bind "$nss" /etc/nsswitch.conf || exit 1
if [ "$uts" = 1 ]; then hostname "$n" || exit 1; fi
"$@" &
c=$!
trap "kill -TERM $c 2>/dev/null" TERM INT HUP
while kill -0 "$c" 2>/dev/null; do wait "$c"; done
'
UFLAGS=(--pid --fork --mount-proc --propagation private)
if [ "$SBX_UTS" = 1 ]; then
	# own hostname (UTS ns): slurmd with NoInAddrAny resolves its hostname;
	# Open MPI's vader/sm segment names contain the hostname and would
	# collide otherwise.
	UFLAGS+=(--uts)
fi
MY_PIDNS=$(readlink /proc/self/ns/pid)
for i in $(seq 1 "$SBX_NODES"); do
	n=n$i
	pre=()
	[ "$SBX_MODE" = netns ] && pre=(nsenter "--net=/run/netns/$SBX_NAME-$n")
	# setsid: own session, so the node survives the shell that ran start.sh.
	# setsid, nsenter and unshare exec each other: $! ends up as unshare's PID.
	setsid "${pre[@]}" unshare "${UFLAGS[@]}" sh -c "$NODE_INIT" sbx-init \
		"$n" "$SBX_UTS" "$R/etc/hosts" "$R/etc/nsswitch.conf" slurmd -D -N "$n" -f "$SLURM_CONF" \
		</dev/null >>"$R/log/node-$n.out" 2>&1 &
	upid=$!
	init="" ; ns=""
	for _ in $(seq 100); do
		if [ "$(cat "/proc/$upid/comm" 2>/dev/null)" = unshare ]; then
			init=$(cut -d' ' -f1 "/proc/$upid/task/$upid/children" 2>/dev/null || true)
			[ -n "$init" ] && ns=$(readlink "/proc/$init/ns/pid" 2>/dev/null || true)
			[ -n "$ns" ] && [ "$ns" != "$MY_PIDNS" ] && break
		fi
		alive "$upid" || break
		sleep 0.05
	done
	[ -n "$ns" ] && [ "$ns" != "$MY_PIDNS" ] || die "slurmd $n: PID namespace not created, see $R/log/node-$n.out"
	echo "$upid" > "$R/run/node-$n.pid"      # launcher (unshare) PID, parent of the namespace init
	echo "$ns" > "$R/run/node-$n.pidns"      # id of the PID namespace start.sh created
	log "slurmd $n: launcher pid $upid, init pid $init, $ns, addr $(node_addr "$i"):$(node_port "$i")"
done

# --- wait until every node is idle -----------------------------------------------------
st=""
for _ in $(seq 300); do
	for i in $(seq 1 "$SBX_NODES"); do
		alive "$(cat "$R/run/node-n$i.pid")" || die "slurmd n$i exited, see $R/log/node-n$i.out and $R/log/slurmd-n$i.log"
	done
	st=$("$R/bin/sbx" sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')
	[ "$st" = "idle " ] && break; sleep 0.2
done
"$R/bin/sbx" sinfo -N -o '%N %t %c %m %G %o'
[ "$st" = "idle " ] || die "nodes not idle ($st), see $R/log/"
log "cluster up: use $R/bin/sbx srun ...   or   . $R/env.sh"
