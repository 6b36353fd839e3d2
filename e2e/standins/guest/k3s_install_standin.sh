#!/bin/sh
# The k3s installer as the lab in a box serves it (e2e/standins/guest/k3s_release_standin.py) at each release's
# install.sh: upstream's interface (INSTALL_K3S_VERSION, run as root) and steps (the binary and its
# checksum from the release, the systemd unit and env file, enable, and a restart only when the
# binary, unit or env file changed), without upstream's extras (channels, SELinux, the uninstall
# and killall scripts, the kubectl/crictl/ctr links). Any other INSTALL_K3S_* or K3S_* variable
# fails. Each run is logged in /var/log/box/installer.log.
set -eu

GITHUB_URL=https://github.com/k3s-io/k3s/releases
BIN=/usr/local/bin/k3s
UNIT=/etc/systemd/system/k3s.service
ENV_FILE=/etc/systemd/system/k3s.service.env
LOG=/var/log/box/installer.log

fatal() {
  echo "[ERROR] $*" >&2
  exit 1
}
info() { echo "[INFO]  $*"; }
# A failed run is logged too, whichever command failed.
finish() {
  rc=$?
  rm -rf "${tmp:-}"
  [ "$rc" -eq 0 ] || echo "$(date +%s) ${INSTALL_K3S_VERSION:-} failed (exit $rc)" >>"$LOG"
}
trap finish EXIT

for name in $(env | sed -n -e 's/^\(INSTALL_K3S_[A-Z_]*\)=.*/\1/p' -e 's/^\(K3S_[A-Z_]*\)=.*/\1/p'); do
  [ "$name" = INSTALL_K3S_VERSION ] || fatal "the box's installer does not know $name"
done
[ -n "${INSTALL_K3S_VERSION:-}" ] || fatal "the box's installer knows no release channel: set INSTALL_K3S_VERSION"
[ "$(id -u)" -eq 0 ] || fatal "must run as root"

hashes() { sha256sum "$BIN" "$UNIT" "$ENV_FILE" 2>/dev/null || true; }
before="$(hashes)"
tmp="$(mktemp -d)"
tag="$(printf %s "$INSTALL_K3S_VERSION" | sed 's/+/%2B/g')"

info "Downloading hash $GITHUB_URL/download/$tag/sha256sum-amd64.txt"
curl -sSfL -o "$tmp/sums" "$GITHUB_URL/download/$tag/sha256sum-amd64.txt"
expected="$(awk '$2 == "k3s" { print $1 }' "$tmp/sums")"
if [ -f "$BIN" ] && [ "$(sha256sum "$BIN" | cut -d ' ' -f 1)" = "$expected" ]; then
  info "Skipping binary downloaded, installed k3s matches hash"
else
  info "Downloading binary $GITHUB_URL/download/$tag/k3s"
  curl -sSfL -o "$tmp/k3s" "$GITHUB_URL/download/$tag/k3s"
  [ "$(sha256sum "$tmp/k3s" | cut -d ' ' -f 1)" = "$expected" ] || fatal "download sha256 does not match $expected"
  chmod 755 "$tmp/k3s"
  mkdir -p "$(dirname "$BIN")"
  mv -f "$tmp/k3s" "$BIN"
  info "Installing k3s to $BIN"
fi

touch "$ENV_FILE"
chmod 0600 "$ENV_FILE"
cat >"$UNIT" <<UNIT
[Unit]
Description=Lightweight Kubernetes
Documentation=https://k3s.io
Wants=network-online.target
After=network-online.target

[Install]
WantedBy=multi-user.target

[Service]
Type=notify
EnvironmentFile=-$ENV_FILE
KillMode=process
Delegate=yes
LimitNOFILE=1048576
Restart=always
RestartSec=5s
TimeoutStartSec=0
ExecStart=$BIN server
UNIT

systemctl daemon-reload
systemctl enable k3s >/dev/null
if [ "$(hashes)" = "$before" ]; then
  info "No change detected so skipping service start"
  echo "$(date +%s) $INSTALL_K3S_VERSION unchanged" >>"$LOG"
  exit 0
fi
info "Starting k3s"
systemctl restart k3s
echo "$(date +%s) $INSTALL_K3S_VERSION installed; k3s restarted" >>"$LOG"
