#!/usr/bin/env bash
# Brings k3s to exactly the version $1: installs it when absent, re-runs the installer of that
# version when another one is installed (an in-place upgrade that keeps all data), and does
# nothing when it is already there. Never uninstalls.
set -euo pipefail

# Whether k3s has not started since file $1 changed (or never started): the installer moves the
# new binary into place before it restarts k3s, so a run that died in between left the old k3s
# running, and its retry finds the version installed, so it must finish the job.
k3s_started_before() {
  local started_at
  started_at="$(systemctl show k3s -p ExecMainStartTimestamp --value)"
  [ -z "$started_at" ] || [ "$started_at" = n/a ] || [ "$(stat -c %Y "$1")" -gt "$(date -d "$started_at" +%s)" ]
}

version="$1"
# `adopt` (taking over a running lab): another installed version is reported, never changed.
mode="${2:-apply}"
case "$mode" in
  apply | adopt) ;;
  *) echo "unknown mode $mode (apply or adopt)" >&2 && exit 2 ;;
esac
installed=""
if command -v k3s >/dev/null 2>&1; then
  installed="$(k3s --version | awk 'NR == 1 { print $3 }')"
fi
if [ "$installed" = "$version" ]; then
  if [ "$mode" = apply ] && k3s_started_before "$(command -v k3s)"; then
    systemctl restart k3s
    echo "k3s $version already installed, but after k3s last started; k3s restarted"
  else
    echo "k3s $version already installed"
  fi
  exit 0
fi
if [ "$mode" = adopt ]; then
  echo "k3s ${installed:-(none)} is installed and k3sVersion is $version, and adoption installs" \
    "nothing: set k3sVersion to the installed version (docs/adoption.md, step 2), then run again" >&2
  exit 3
fi

installer="$(mktemp)"
trap 'rm -f "$installer"' EXIT
# The installer at the same tag as the binary, not the floating get.k3s.io script.
curl -sSfL --retry 5 -o "$installer" "https://raw.githubusercontent.com/k3s-io/k3s/${version/+/%2B}/install.sh"
INSTALL_K3S_VERSION="$version" sh "$installer"
echo "k3s $version installed (previously: ${installed:-none})"
