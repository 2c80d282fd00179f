#!/usr/bin/env bash
# Install Leveret under /opt/leveret with systemd units, one node per name given:
#   sudo deploy/systemd/install.sh node1 [node2 ...]
# Each node gets /etc/leveret/NAME.toml (from deploy/leveret.toml, data_dir and port set) and
# /var/lib/leveret/NAME (0700, the leveret user's only); start with `systemctl start leveret@NAME`
# or `leveret.target`. A cluster's members share one secret: the first node creates
# /var/lib/leveret/NAME/cluster_secret; copy it (mode 0400, owner leveret) to every other member
# before starting it, or set cluster_secret_file (docs/security.md).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root (sudo $0 $*)"; exit 1; }
[ $# -ge 1 ] || { echo "usage: $0 NODE_NAME [NODE_NAME ...]"; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
id leveret >/dev/null 2>&1 || useradd --system --home-dir /var/lib/leveret --shell /usr/sbin/nologin leveret
install -d -o root -g root /opt/leveret /etc/leveret
cp -a "$repo/." /opt/leveret/
make -C /opt/leveret venv
install -m 0644 "$repo/deploy/systemd/leveret@.service" "$repo/deploy/systemd/leveret.target" /etc/systemd/system/
port=5672
for name in "$@"; do
  install -d -o leveret -g leveret -m 0700 "/var/lib/leveret/$name"
  conf="/etc/leveret/$name.toml"
  if [ ! -e "$conf" ]; then
    (umask 027; sed -e "s|^data_dir = .*|data_dir = \"/var/lib/leveret/$name\"|" \
        -e "s|^port = .*|port = $port|" \
        -e "s|^node_name = .*||" "$repo/deploy/leveret.toml" > "$conf")
    printf 'node_name = "%s"\n' "$name" >> "$conf"
    chown root:leveret "$conf"
    chmod 0640 "$conf"  # it may hold cluster_secret: readable by the broker, not by everyone
  fi
  port=$((port + 1))
  systemctl enable "leveret@$name"
done
systemctl daemon-reload
echo "installed: systemctl start leveret.target (or leveret@NAME); logs: journalctl -u 'leveret@*'"
