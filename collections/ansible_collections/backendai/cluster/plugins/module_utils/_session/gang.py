# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gang: the failure policy every container of a session applies to itself (docs/failure-policy.md). Pure.

When the spec's ``failure.policy`` is not ``none``, the session's job carries :data:`GANG_SCRIPT` in its Meta
(:func:`gang_meta`), and the entrypoint (``_nomad.job.ENTRYPOINT``, the one container start of both backends) runs
it instead of exec'ing the command: a supervisor in the bundle's busybox sh that

* listens on ``failure.port`` on the session network (busybox ``nc -ll``; one line in, ``<generation> <state>`` out);
* runs the command as the session user in its own process group (``setsid``), with ``BACKENDAI_RESTART_COUNT``
  and ``BACKENDAI_HEARTBEAT_FILE``, and notices within :data:`TICK` when it ends, or when its heartbeat file is
  older than ``hang_timeout``;
* probes the next :data:`WATCHED` members of the ring of containers once a second (a peer that answers neither of
  two probes is gone), and learns a newer generation or a failure from every answer (what a lost message missed);
* on a failure decides what the policy says (``fail_on_exit_codes`` and ``max_restarts`` within ``window`` turn any
  policy into ``fail``) and tells every member directly: ``restart <generation> ...``, ``fail ...``, ``note ...``;
* under ``restart_all`` stops its command (TERM to the group, KILL after :data:`GRACE`), and starts it again only
  when every member answers at the new generation or a later one (the barrier: a half of a split network never
  runs its command, and gives up after ``rejoin_timeout``);
* writes what it knows to ``$NOMAD_ALLOC_DIR/backendai/gang`` (:data:`STATUS_FILE`), which ``session_info``
  reads (:func:`parse_status`): policy, state, generation, restarts, the last and the first failure.

The same supervisor keeps the spec's ``max_run_time`` (the 8th field of the policy line: when the first member's time
is up it ends the gang as ``fail`` does, reason ``max_run_time <N>s exceeded``) and ``keep_after`` (the 9th: a container
whose part is over stays up that long, its end in the status file's ``ended`` line), under policy ``none`` too, where
it only does that (docs/session-lifecycle.md).

Messages (one line each, fields separated by one space, the reason last): ``ping HOST`` (the probe), ``restart GEN
HOST CODE REASON`` (restart_all: everyone moves to GEN), ``fail GEN STATE TIME HOST CODE REASON`` (everyone stops;
the first failure as the container that saw it had it, which every probe's answer carries too),
``note GEN HOST CODE REASON`` (restart_one: HOST restarted itself), ``done HOST`` (HOST's command completed).
CODE is ``-`` when there is none (a hang, a container gone).
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import FailureSpec, SessionSpec

#: Job Meta keys (the task sees them as NOMAD_META_<KEY>).
SCRIPT_META_KEY = "BACKENDAI_GANG_SCRIPT"
POLICY_META_KEY = "BACKENDAI_FAILURE"
MEMBERS_META_KEY = "BACKENDAI_GANG_MEMBERS"
#: Under the allocation directory (``$NOMAD_ALLOC_DIR``): the supervisor's status, for session_info.
STATUS_FILE = "backendai/gang"
#: Where the command's heartbeat file is (a directory the session user owns).
HEARTBEAT_FILE = "/run/backendai-heartbeat/heartbeat"
#: The supervisor's poll interval (s), how many ring successors each container probes, the stop grace (s).
TICK = "0.2"
WATCHED = 2
GRACE = 5
#: States the status file names (``state`` line).
STARTING, RUNNING, STOPPING, WAITING, DONE, FAILED, GAVE_UP, STOPPED = (
    "starting", "running", "stopping", "waiting", "done", "failed", "gave_up", "stopped")
#: States in which the gang is bringing commands back (the session shows RESTARTING).
HEALING = frozenset((STOPPING, WAITING))

#: How many members each container passes a broadcast on to (:data:`RELAY_SCRIPT`).
FANOUT = 4
# ``$GD/relay ORIGIN MESSAGE`` (written by the supervisor with MEMBERS, L, GPORT, ME and K=FANOUT at its top): passes
# MESSAGE (one line) on to this container's children in the broadcast tree of ORIGIN, the member that tells it. Ranks
# are positions in the members' ring counted from ORIGIN (0); rank r's children are ranks K*r+1 .. K*r+K, so ORIGIN
# makes K connections, not N-1, and a message reaches N members in about log_K(N) hops. A child that does not answer
# (gone, or done) is skipped: its children get the message from here instead, so one container gone does not cut off
# its subtree. Every receiver's handler runs this for a ``relay ORIGIN MESSAGE`` line, then keeps MESSAGE as a message
# told to it directly.
RELAY_SCRIPT = r"""
o=$1 msg=$2
rank() { echo "$MEMBERS" | awk -v o="$o" -v h="$1" '{for(i=1;i<=NF;i++){if($i==o)s=i;if($i==h)m=i}; print (m-s+NF)%NF}'; }
kids() { echo "$MEMBERS" | awk -v o="$o" -v r="$1" -v k="$K" '{for(i=1;i<=NF;i++)if($i==o)s=i-1
  for(c=k*r+1;c<=k*r+k&&c<NF;c++)print c, $((s+c)%NF+1)}'; }
send() {  # rank host: the message to host, or, when it does not answer, to its children in its stead
  A=; while read -r a h; do [ "$h" != "$2" ] || A=$a; done < $L/peers
  [ -n "$A" ] && echo "relay $o $msg" | nc -w 1 "$A" "$GPORT" >/dev/null 2>&1 && return 0
  fan "$1"
}
fan() { kids "$1" | { ps=; while read -r c h; do send "$c" "$h" & ps="$ps $!"; done; [ -z "$ps" ] || wait $ps; }; }
fan "$(rank "$ME")"
"""

# Runs in the entrypoint after sshd started, as root, with the entrypoint's variables: B (the runtime bundle), L
# (the task's local dir), RUN (how to run as the user, or "su"), X (a shell), U/UI/GI (the user), and "$@" the
# command. Never returns.
GANG_SCRIPT = r"""
set +eu  # not the entrypoint's -e and -u: a supervisor outlives a failed probe and an empty answer
[ -n "$BOK" ] || fail 78 "the failure policy needs the session runtime bundle at $B (its busybox supervises the command)"
GD=/run/backendai/gang SD=${NOMAD_ALLOC_DIR:-/alloc}/backendai HB=@HB@ ME=$BACKENDAI_CLUSTER_HOST
mkdir -p $GD $SD "${HB%/*}"; rm -f $GD/in.* $GD/rc $GD/pid; chown "$UI:$GI" "${HB%/*}"
read -r GP GMAX GWIN GHANG GREJ GPORT GCODES GMRT GKEEP <<EOF
$NOMAD_META_BACKENDAI_FAILURE
EOF
GMRT=${GMRT:-0} GKEEP=${GKEEP:--1}  # max_run_time (s; 0: no limit), from this supervisor's start; keep_after (-1: none)
MEMBERS=$(echo "$NOMAD_META_BACKENDAI_GANG_MEMBERS" | tr , ' ')
G=0 R=0 ST=starting LAST= FIRST= HIST= DONE= LOST= MISS= CPID= T0=0 TW=0 NEXTW=0 BM= AG= AS= GO=- END= IA=
[ $# -gt 0 ] || IA=1  # an interactive member: no command, only the time, the end and the gang's messages
export BACKENDAI_HEARTBEAT_FILE=$HB
up() { read -r u _ < /proc/uptime; echo "${u%.*}${u#*.}"; }  # centiseconds
publish() {
  echo "$G $ST $FIRST" > $GD/now.t; mv -f $GD/now.t $GD/now  # what a probe gets back
  { echo "policy $GP"; echo "state $ST"; echo "generation $G"; echo "restarts $R"
    [ -z "$LAST" ] || echo "last $LAST"; [ -z "$FIRST" ] || echo "first $FIRST"; [ -z "$END" ] || echo "ended $END"
  } > $SD/gang.t
  mv -f $SD/gang.t $SD/gang
}
{ echo "#!$B/bin/sh"; echo "MEMBERS='$MEMBERS' L=$L GPORT=$GPORT ME=$ME K=@FANOUT@"; cat <<'EOR'
@RELAY@
EOR
} > $GD/relay
{ echo "#!$B/bin/sh"
  echo "read -t 2 -r m"
  echo "case \"\$m\" in ping*|'') ;; relay\ *) o=\${m#relay }; m=\${o#* }; o=\${o%% *}; $GD/relay \"\$o\" \"\$m\" </dev/null >/dev/null 2>&1 & ;; esac"
  echo "case \"\$m\" in ping*|'') ;; *) echo \"\$m\" > $GD/t.\$\$; mv $GD/t.\$\$ $GD/in.\$\$;; esac"
  echo "cat $GD/now"; } > $GD/handle
chmod 700 $GD/handle $GD/relay; TW=$(up); TS=$TW; publish
nc -ll -p "$GPORT" -e $GD/handle &
addr() { A=; while read -r a h; do [ "$h" != "$1" ] || { A=$a; return 0; }; done < $L/peers; }  # (no fork)
others() { for m in $MEMBERS; do [ "$m" = "$ME" ] || case " $DONE " in *" $m "*) ;; *) echo "$m";; esac; done; }
ask() { addr "$1"; [ -n "$A" ] && echo "$2" | nc -w 1 "$A" "$GPORT" 2>/dev/null; }
tell() { $GD/relay "$ME" "$1"; }  # to every member, through the broadcast tree (RELAY_SCRIPT)
stamp() { echo "$(date +%s) $1 $2 $3"; }
stop_cmd() {  # TERM to the command's process group, KILL after the grace
  [ -n "$CPID" ] || return 0
  kill -TERM -"$CPID" 2>/dev/null; i=0
  while [ ! -e $GD/rc ] && [ $i -lt $((@GRACE@ * 10)) ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -"$CPID" 2>/dev/null; while [ ! -e $GD/rc ]; do sleep 0.05; done; CPID=
}
trap 'stop_cmd; ST=stopped; publish; exit 143' TERM INT
finish() {  # code: this container's part is over; with keep_after it stays up (sshd, network, logs) that long first
  if [ "$GKEEP" -ge 0 ]; then END="$1 $(date +%s) $GKEEP"; publish; sleep "$GKEEP" & wait $!; fi; exit "$1"
}
give_up() {  # host code reason [state [told]]: every container stops, the first failure is kept
  [ -n "$FIRST" ] || FIRST=$(stamp "$1" "$2" "$3"); LAST=$FIRST; ST=${4:-failed}; publish
  [ -n "${5:-}" ] || tell "fail $G $ST $FIRST"
  stop_cmd; echo "backendai: failure policy $GP: $ST: $1: $3" >&2
  if [ "$1" = "$ME" ] && [ "$2" != - ] && [ "$2" -gt 0 ] 2>/dev/null; then finish "$2"; fi; finish 1
}
adopt_fail() {  # state first...: the end another container told (its first failure as it was seen: time host code why)
  s=$1; shift; [ -n "$FIRST" ] || FIRST="$*"; give_up "$2" "$3" "$*" "$s" told
}
recent() { n=0; now=$(up); for x in $HIST; do [ $((now - x)) -ge $((GWIN * 100)) ] || n=$((n+1)); done; echo $n; }
restart_all() {  # gen host code reason: stop the command, then wait (the barrier) for every member at gen
  LAST=$(stamp "$2" "$3" "$4"); ST=stopping; publish; stop_cmd
  G=$1 R=$1 HIST="$HIST $(up)" ST=waiting TW=$(up); publish
}
failed() {  # host code reason command...: what the policy says about a failure seen here
  if [ "$GP" = none ]; then  # no policy (a supervisor for max_run_time only): a command that failed ends its
    [ "$1" = "$ME" ] || return 0  # container with its code, as without a supervisor; the others go on
    case "$2" in ''|-|*[!0-9]*) finish 1;; esac; finish "$2"
  fi
  [ "$2" = - ] || case ",$GCODES," in *",$2,"*) give_up "$1" "$2" "$3 (exit code $2 is in fail_on_exit_codes)";; esac
  [ "$GP" != fail ] || give_up "$1" "$2" "$3"
  [ "$GP" != restart_all ] || [ -z "$DONE" ] || give_up "$1" "$2" "$3 (after$DONE completed)"
  [ "$(recent)" -lt "$GMAX" ] || give_up "$1" "$2" "$3 (after $GMAX restarts within ${GWIN}s)" gave_up
  if [ "$GP" = restart_all ]; then tell "restart $((G+1)) $1 $2 $3"; restart_all $((G+1)) "$1" "$2" "$3"
  elif [ "$1" = "$ME" ]; then
    R=$((R+1)) HIST="$HIST $(up)" LAST=$(stamp "$1" "$2" "$3"); tell "note $G $1 $2 $3"; shift 3; start "$@"
  else LOST="$LOST $1@$(up)" LAST=$(stamp "$1" "$2" "$3"); publish; fi
}
start() {
  if [ -n "$IA" ]; then ST=running T0=$(date +%s); publish; return 0; fi  # (its sshd runs on, started before)
  rm -f $GD/rc $GD/pid; : > "$HB"; chown "$UI:$GI" "$HB"
  export BACKENDAI_RESTART_COUNT=$R
  if [ "$RUN" = su ]; then
    (setsid su -m -s "$X" "$U" -c 'exec "$0" "$@"' "$@" & echo $! > $GD/pid; wait $!; echo $? > $GD/rc.t; mv $GD/rc.t $GD/rc) &
  else (setsid $RUN "$@" & echo $! > $GD/pid; wait $!; echo $? > $GD/rc.t; mv $GD/rc.t $GD/rc) & fi
  while [ ! -s $GD/pid ]; do sleep 0.02; done; read -r CPID < $GD/pid; ST=running T0=$(date +%s); publish
}
answer() {  # member: asks its "generation state"; learns a failure or (restart_all) a later generation from it
  r=$(ask "$1" "ping $ME") && [ -n "$r" ] || return 1
  set -- "$1" $r; AG=$2 AS=${3:-}
  case "${3:-}" in failed|gave_up) shift 2; adopt_fail "$@";; esac
  [ "$GP" != restart_all ] || [ "$AG" -le "$G" ] || restart_all "$AG" "$1" - "learned from $1 that the gang restarts"
}
coord() { C=; for m in $MEMBERS; do case " $DONE " in *" $m "*) ;; *) C=$m; return 0;; esac; done; }  # (no fork)
barrier() {  # every member is at this generation (its old command is stopped): O(N) probes a tick, not N^2
  coord
  if [ "$C" = "$ME" ]; then  # the gang's coordinator (its first member not done) asks every member, then says go
    for m in $(others); do BM=$m; answer "$m" && [ "$AG" -eq "$G" ] || return 1; done
    tell "go $G"; return 0
  fi
  [ "$GO" != "$G" ] || return 0  # the coordinator's go, told through the tree; else asked: it runs at this generation
  BM=$C; answer "$C" && [ "$AG" -eq "$G" ] && case "$AS" in running|done) ;; *) false;; esac
}
watch() {  # the next WATCHED members of the ring after this one: an answer, or two missed ones (gone)
  set -- $MEMBERS $MEMBERS; n=0
  while [ $# -gt 0 ] && [ "$1" != "$ME" ]; do shift; done; shift
  for m in "$@"; do
    [ "$m" != "$ME" ] && [ $n -lt @WATCHED@ ] || break
    case " $DONE " in *" $m "*) continue;; esac; n=$((n+1))
    if answer "$m"; then
      MISS=$(for x in $MISS; do [ "$x" = "$m" ] || echo "$x"; done)
      LOST=$(for x in $LOST; do [ "${x%@*}" = "$m" ] || echo "$x"; done)
    else case " $(echo $MISS) " in
      *" $m "*) case " $(echo $LOST) " in *" $m@"*) ;; *)
        failed "$m" - "$m does not answer on the session network (its container is gone or cut off)";; esac;;
      *) MISS="$MISS $m";;
    esac; fi
    [ "$ST" = running ] || break
  done
}
while :; do
  for f in $GD/in.*; do
    [ -e "$f" ] || continue; read -r k g rest < "$f"; rm -f "$f"
    h=${rest%% *} x=${rest#* }; c=${x%% *} why=${x#* }
    case "$k" in
      fail) adopt_fail $rest;;
      restart) [ "$GP" != restart_all ] || [ "$g" -le "$G" ] || restart_all "$g" "$h" "$c" "$why";;
      note) LAST=$(stamp "$h" "$c" "$why"); publish;;
      done) DONE="$DONE $g";;
      go) GO=$g;;
    esac
  done
  if [ "$GMRT" -gt 0 ] && [ $(( $(up) - TS )) -ge $((GMRT * 100)) ]; then
    give_up "$ME" - "max_run_time ${GMRT}s exceeded: every command was stopped"
  fi
  case "$ST" in
    running)
      if [ -e $GD/rc ]; then
        read -r rc < $GD/rc; kill -KILL -"$CPID" 2>/dev/null; CPID=
        if [ "$rc" = 0 ]; then ST=done; publish; tell "done $ME"; finish 0; fi
        why="the command exited with code $rc"
        [ "$rc" -le 128 ] || why="the command was killed by signal $((rc - 128))"
        [ "$rc" != 137 ] || why="$why (SIGKILL: kill -9, or the kernel's OOM killer)"
        failed "$ME" "$rc" "$why" "$@"
      elif [ -z "$IA" ] && [ "$GHANG" -gt 0 ] && [ $(( $(date +%s) - $(stat -c %Y "$HB" 2>/dev/null || echo "$T0") )) -ge "$GHANG" ]; then
        stop_cmd; failed "$ME" - "the command hung: its heartbeat file was not touched for ${GHANG}s" "$@"
      fi
      for x in $LOST; do
        [ $(( $(up) - ${x#*@} )) -lt $((GREJ * 100)) ] || give_up "${x%@*}" - "${x%@*} did not come back within ${GREJ}s (rejoin_timeout)"
      done
      if [ "$ST" = running ] && [ "$GP" != none ] && [ "$(up)" -ge "$NEXTW" ]; then NEXTW=$(( $(up) + 100 )); watch; fi;;
    starting|waiting)
      if [ "$GP" = none ] || barrier; then start "$@"
      elif [ "$C" = "$ME" ] && [ $(( $(up) - TW )) -ge $((GREJ * 100)) ]; then
        give_up "$BM" - "the gang did not come back together within ${GREJ}s (rejoin_timeout): no answer from $BM"
      elif [ $(( $(up) - TW )) -ge $((GREJ * 100 + 300)) ]; then  # (3 s more: the coordinator's reason names the culprit)
        give_up "$C" - "the gang did not come back together within ${GREJ}s (rejoin_timeout): $C did not start it (no answer, or no go)"
      fi;;
  esac
  sleep @TICK@
done
""".replace("@RELAY@", RELAY_SCRIPT.strip("\n")).replace("@FANOUT@", str(FANOUT)).replace("@HB@", HEARTBEAT_FILE).replace(
    "@GRACE@", str(GRACE)).replace("@WATCHED@", str(WATCHED)).replace("@TICK@", TICK)


def policy_line(failure: FailureSpec, max_run_time: int = 0, keep_after: t.Optional[int] = None) -> str:
    """The Meta value the script reads its policy from: ``policy max window hang rejoin port codes``, then
    ``max_run_time`` (0: none) and ``keep_after`` when either is set (a line without them is what it was before
    they existed)."""
    line = "%s %d %d %d %d %d %s" % (failure.policy, failure.max_restarts, failure.window, failure.hang_timeout,
                                     failure.rejoin_timeout, failure.port,
                                     ",".join(str(c) for c in failure.fail_on_exit_codes) or "-")
    if keep_after is not None:
        return line + " %d %d" % (max_run_time, keep_after)
    return line + (" %d" % max_run_time if max_run_time else "")


def gang_members(containers: t.Sequence[t.Any], lifetime: bool = False) -> t.List[str]:
    """The hostnames whose supervisor is a member of the gang, in the session's order (``containers``: the plan's, with
    ``hostname`` and ``command``): the containers that run a command; with a ``lifetime`` (the session's
    ``max_run_time`` or ``keep_after``: ``SessionSpec.has_lifetime``) every container, interactive ones too (their
    supervisor runs no command: it keeps the session's time, takes the gang's messages and keeps the container up
    ``keep_after`` seconds after the end; docs/session-lifecycle.md)."""
    return [c.hostname for c in containers if c.command or lifetime]


def gang_meta(spec: SessionSpec, members: t.Sequence[str]) -> t.Dict[str, str]:
    """Job Meta of a session whose policy is not none or that has a lifetime
    (``members``: :func:`gang_members`); empty otherwise (the job is what it was before the supervisor existed). Under
    policy none the supervisor only keeps the time and the end: a failed command ends its container as without it, and
    nobody is watched."""
    if not spec.supervised or not members:
        return {}
    return {SCRIPT_META_KEY: GANG_SCRIPT, POLICY_META_KEY: policy_line(spec.failure, spec.max_run_time, spec.keep_after),
            MEMBERS_META_KEY: ",".join(members)}


def parse_status(text: str) -> t.Dict[str, t.Any]:
    """The status file's content as a dict: policy, state, generation, restarts, and ``last``/``first`` failure as
    ``{time, host, exit_code, reason}`` (exit_code None when there was none). Unknown lines are ignored."""
    out: t.Dict[str, t.Any] = {}
    for line in text.splitlines():
        key, value = (line.split(" ", 1) + [""])[:2]
        if key in ("policy", "state"):
            out[key] = value
        elif key in ("generation", "restarts") and value.isdigit():
            out[key] = int(value)
        elif key == "ended":  # the container's part is over (exit code, when, keep_after): it stays up that long
            parts = value.split(" ")
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                out[key] = {"exit_code": int(parts[0]), "time": int(parts[1]), "keep_after": int(parts[2])}
        elif key in ("last", "first"):
            parts = value.split(" ", 3)
            if len(parts) == 4 and parts[0].isdigit():
                code = int(parts[2]) if parts[2].isdigit() else None
                out[key] = {"time": int(parts[0]), "host": parts[1], "exit_code": code, "reason": parts[3]}
    return out


def apply_status(containers: t.List[t.Dict[str, t.Any]], gangs: t.Mapping[str, t.Mapping[str, t.Any]],
                 key: str = "status") -> t.Optional[t.Dict[str, t.Any]]:
    """Update the session view's ``containers`` (by ``hostname``; ``key``: the field holding the container status)
    with their parsed status files (``gangs``, by hostname): ``restarts``, ``last_failure``, ``restarting`` while the
    gang brings the command back, and the failure that stopped a container the policy ended. Returns the session's
    ``failure`` summary (policy; state running, restarting, failed or gave_up; restarts; the first failure), or
    None when no status file was read (no policy, or none readable)."""
    gangs = {h: g for h, g in gangs.items() if g}
    if not gangs:
        return None
    # the first failure: as the container that had it tells it (it knows the reason), else the earliest told
    firsts = [g["first"] for g in gangs.values() if g.get("first")]
    own = [g["first"] for h, g in gangs.items() if g.get("first") and g["first"]["host"] == h]
    first = min(own or firsts, key=lambda f: f["time"]) if firsts else None
    states = {g.get("state") for g in gangs.values()}
    for c in containers:
        g = gangs.get(c["hostname"])
        if g is None:
            continue
        c["restarts"] = g.get("restarts", 0)
        if g.get("last"):
            c["last_failure"] = dict(g["last"])
        ended = g.get("ended")
        if ended and c[key] == "running":  # over, kept up for keep_after: shown as it ended
            code = ended["exit_code"]
            c[key] = "complete" if code == 0 else "failed"
            c["exit_code"] = code
            c["reason"] = "" if code == 0 else "the command exited with code %d" % code
        if c[key] == "running" and g.get("state") in HEALING:
            c[key] = "restarting"
            c["reason"] = "the failure policy restarts the command (generation %s)" % g.get("generation", 0)
        elif c[key] == "failed" and g.get("state") in (FAILED, GAVE_UP) and first:
            own_failure = first["host"] == c["hostname"]
            if is_timeout(first):
                c["reason"] = "stopped: %s" % first["reason"]
                continue
            c["reason"] = "%s by the failure policy: %s" % (
                "gave up" if g.get("state") == GAVE_UP else "stopped",
                first["reason"] if own_failure else "%s: %s" % (first["host"], first["reason"]))
    state = GAVE_UP if GAVE_UP in states else FAILED if FAILED in states else (
        "restarting" if states & HEALING else "running")
    policy = next(iter(gangs.values())).get("policy", "")
    if policy == "none" and state != FAILED:  # a supervisor that only keeps max_run_time: nothing to show yet
        return None
    restarts = max(g.get("generation", 0) if policy == "restart_all" else g.get("restarts", 0) for g in gangs.values())
    return {"policy": policy, "state": state, "restarts": restarts, "first_failure": first}


def failure_reason(summary: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """One line for a session the policy ended: the first failure's container, exit code and reason ('' otherwise)."""
    if not summary or summary["state"] not in (FAILED, GAVE_UP) or not summary.get("first_failure"):
        return ""
    first = summary["first_failure"]
    if is_timeout(first):
        return "%s (first seen by %s)" % (first["reason"], first["host"])
    code = ", exit code %d" % first["exit_code"] if first.get("exit_code") is not None else ""
    return "failure policy %s %s: %s%s: %s" % (summary["policy"], "gave up" if summary["state"] == GAVE_UP else "failed",
                                               first["host"], code, first["reason"])


#: How the supervisor's reason for a session it ended at ``max_run_time`` begins (``max_run_time 30s exceeded: ...``).
TIMEOUT_REASON = "max_run_time "


def is_timeout(failure: t.Optional[t.Mapping[str, t.Any]]) -> bool:
    """Whether a (first) failure is the session's ``max_run_time`` running out, not a container's failure."""
    return bool(failure) and str(failure.get("reason", "")).startswith(TIMEOUT_REASON) and failure.get("exit_code") is None
