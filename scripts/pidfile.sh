# Pid files that never name another process: sourced by scripts/kafka.sh and scripts/stack.sh.
# A pid file outlives its process (a reboot, a kill -9) and its pid may name any other process by
# then, which must never be signalled: the process's start time, recorded beside the pid
# (PIDFILE.start), tells them apart (a pid file without it is trusted, as before it existed).

# started_at PID: the process's start time (clock ticks since boot, field 22 of /proc/PID/stat;
# empty without /proc)
started_at() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  # shellcheck disable=SC2086
  set -- ${stat##*) }  # the fields after the command name, which may hold spaces: state is $1
  echo "${20:-}"
}

# record_pid PIDFILE PID: write the pid and its start time
record_pid() {
  echo "$2" >"$1"
  started_at "$2" >"$1.start"
}

# pid_running PIDFILE: the process that PIDFILE records is alive (and is that process)
pid_running() {
  [ -f "$1" ] || return 1
  local pid recorded
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 1
  recorded=$(cat "$1.start" 2>/dev/null || true)
  [ -z "$recorded" ] || [ "$recorded" = "$(started_at "$pid")" ]
}
