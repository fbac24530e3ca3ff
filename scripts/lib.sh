# Shared helpers of the scripts in this folder (sourced, not run).

# Starts a step: prints its name and how long the step before it took, and keeps the times
# for step_times. Seconds are the script's own ($SECONDS), so each script that sources this
# file times its own steps.
_step_names=()
_step_secs=()
step() {
  _step_close
  _step_names+=("$*")
  _step_at=$SECONDS
  printf '\n== %s == (%d s in)\n' "$*" "$SECONDS"
}
_step_close() {
  if [ -n "${_step_at:-}" ]; then
    _step_secs+=($((SECONDS - _step_at)))
    printf '== %s: %d s ==\n' "${_step_names[-1]}" "${_step_secs[-1]}"
    _step_at=
  fi
}
# Prints every step's time and the total: where a run's minutes went (a trap on EXIT shows it
# for a run that failed too).
step_times() {
  _step_close
  printf '\n== time per step ==\n'
  for i in "${!_step_secs[@]}"; do
    printf '%6d s  %s\n' "${_step_secs[$i]}" "${_step_names[$i]}"
  done
  printf '%6d s  in all\n' "$SECONDS"
}

# Installs Debian packages that are missing: apt-get as root, or through sudo.
need_packages() {
  missing=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  step "installing$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
}
