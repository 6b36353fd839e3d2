#!/usr/bin/env bash
# Prints k3s's admin kubeconfig; the program rewrites it and keeps it only as a secret. When a
# command fails, pulumi-command puts its whole output into the error message whatever `logging`
# says, so nothing of the file is printed until every check has passed, and then all of it at once;
# a failure names the problem on stderr and shows none of the content.
set -euo pipefail

kubeconfig_file="${K3S_KUBECONFIG_FILE:-/etc/rancher/k3s/k3s.yaml}"
nl=$'\n'

refuse() {
  echo "$kubeconfig_file: $1; not printing it" >&2
  exit 1
}

# A top-level list `$1:` whose first line is an entry, as k3s writes it.
has_entry() {
  [[ "$nl$content" =~ ${nl}$1:[[:blank:]]*${nl}[[:blank:]]*-[[:blank:]] ]]
}

[ -f "$kubeconfig_file" ] || refuse "no such file"
[ -r "$kubeconfig_file" ] || refuse "not readable"
# Read once, so that what was checked is what is printed; the x keeps the file's final newlines,
# which command substitution would drop.
content="$(cat -- "$kubeconfig_file" 2>/dev/null && printf x)" || refuse "cannot be read"
content="${content%x}"
[ -n "$content" ] || refuse "empty"
[[ "$nl$content$nl" == *"${nl}kind: Config${nl}"* ]] || refuse "no 'kind: Config', not a kubeconfig"
has_entry clusters || refuse "no cluster entry"
has_entry users || refuse "no user entry"

printf '%s' "$content"
