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
# engine_ticks PID: user + system ticks of the process's main thread, the
# engine's (named as the binary, whatever the binary is called).
engine_ticks() { awk '{print $14 + $15}' "/proc/$1/task/$1/stat" 2>/dev/null || echo 0; }
# pid pattern -> user + system ticks of the process's threads whose name
# matches the glob (the WAL writer `stoa-wal`; the partition workers
# `stoa-part-<k>`, owned partitions' threads `stoa-own-<k>`).
thread_ticks() {
  local t total=0
  for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm" 2>/dev/null)" in
      $2) total=$((total + $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0))) ;;
    esac
  done
  echo "$total"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# base_cfg DIR: the zoo.cfg lines every script's standalone server takes
# (data in DIR, a free port in PORT, every four-letter word, no AdminServer).
base_cfg() {
  PORT=$(free_port)
  echo tickTime=2000; echo "dataDir=$1"; echo "clientPort=$PORT"
  echo clientPortAddress=127.0.0.1; echo '4lw.commands.whitelist=*'
  echo admin.enableServer=false
}

# start_server DIR WHAT: starts $BIN on DIR/zoo.cfg and waits (30 s at
# most) until it serves on PORT as a standalone server; sets SERVER_PID.
start_server() {
  local d=$1 what=$2 deadline=$((SECONDS + 30))
  "$BIN" server --config "$d/zoo.cfg" >"$d/log" 2>&1 &
  SERVER_PID=$!
  PIDS+=($SERVER_PID)
  until [[ $(srvr "$PORT") == *"Mode: standalone"* ]]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "$what did not come up" >&2; tail -5 "$d/log" >&2; return 1
    fi
    sleep 0.2
  done
}
