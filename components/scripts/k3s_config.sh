#!/usr/bin/env bash
# Writes k3s's config.yaml (given base64-encoded as $1) when its settings differ, and restarts an
# installed k3s so that it takes them; the k3s installer never manages this file. With `adopt` as
# $2 (taking over a running lab) a difference is reported and nothing is written or restarted.
set -euo pipefail

# Whether k3s has not started since file $1 changed (or never started): a run that died between
# writing the file and restarting k3s left k3s on the old settings, and its retry finds the file
# as wanted, so it must finish the job.
k3s_started_before() {
  local started_at
  started_at="$(systemctl show k3s -p ExecMainStartTimestamp --value)"
  [ -z "$started_at" ] || [ "$started_at" = n/a ] || [ "$(stat -c %Y "$1")" -gt "$(date -d "$started_at" +%s)" ]
}

config_file="${K3S_CONFIG_FILE:-/etc/rancher/k3s/config.yaml}"
wanted="$(printf '%s' "$1" | base64 -d)"
mode="${2:-apply}"
case "$mode" in
  apply | adopt) ;;
  *) echo "unknown mode $mode (apply or adopt)" >&2 && exit 2 ;;
esac

# The same settings written another way (the lab's file came from an Ansible template: a header
# comment, other indentation, quoting, key order, flow lists) are no change, and restarting k3s for
# one would be an outage for nothing; so the two are compared as YAML data. A file that is no YAML
# is a difference. Anything else going wrong (no PyYAML, say) stops here rather than rewrite blind.
verdict="different"
if [ -f "$config_file" ]; then
  verdict="$(python3 -c '
import sys, yaml
wanted = yaml.safe_load(sys.argv[2])
try:
    with open(sys.argv[1], "rb") as existing:
        same = yaml.safe_load(existing) == wanted
except yaml.YAMLError:
    same = False
print("same" if same else "different")
' "$config_file" "$wanted")"
fi
if [ "$verdict" = same ]; then
  if [ "$mode" = apply ] && command -v k3s >/dev/null 2>&1 && k3s_started_before "$config_file"; then
    systemctl restart k3s
    echo "k3s config unchanged, but written after k3s last started; k3s restarted"
  else
    echo "k3s config unchanged"
  fi
  exit 0
fi
if [ "$mode" = adopt ]; then
  echo "$config_file does not hold the program's k3s settings, and adoption changes nothing on the" \
    "host: make them match (docs/adoption.md, step 2), then run again" >&2
  exit 3
fi

install -d -m 0755 "$(dirname "$config_file")"
staged="$(mktemp "$config_file.XXXXXX")"
printf '%s\n' "$wanted" >"$staged"
chmod 0600 "$staged"
mv -f "$staged" "$config_file"

if command -v k3s >/dev/null 2>&1; then
  systemctl restart k3s
  echo "k3s config changed; k3s restarted"
else
  echo "k3s config written"
fi
