# What the device scripts share (sourced; bash only: the device machine has
# nothing installed). Servers started go in PIDS and are stopped by PID.

PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  PIDS=()
}

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
free_port() {
  local port=$((20000 + RANDOM % 20000))
  until port_free $port; do port=$((port + 1)); done
  echo $port
}
srvr() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf srvr >&3 && cat <&3" 2>/dev/null; }

# field NAME FILE: a number from a bench --json file (0 when missing).
field() { grep -o "\"$1\": *[0-9.]*" "$2" 2>/dev/null | head -1 | grep -o '[0-9.]*$' || echo 0; }
# cpu_ticks PID: the process's user and system time, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
