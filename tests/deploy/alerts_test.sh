#!/usr/bin/env bash
# alerts_test.sh — deploy/prometheus/ringfire-alerts.yml: promtool accepts
# it, its unit test (ringfire-alerts.test.yml: every alert fires on its
# trouble and stays quiet on a healthy host) passes, and every ringfire_*
# series it names is one the daemons export (a renamed metric would leave
# an alert that can never fire). metrics_lab loads the same rules into a
# real Prometheus over live daemons.
# Usage: alerts_test.sh SOURCE_ROOT
set -u
root=$1
rules=$root/deploy/prometheus/ringfire-alerts.yml
command -v promtool >/dev/null || { echo "SKIP: no promtool (apt-get install prometheus)"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
out=$(promtool check rules "$rules" 2>&1) || fail "promtool check rules: $out"
out=$(cd "$root/tests/deploy" && promtool test rules ringfire-alerts.test.yml 2>&1) || fail "promtool test rules: $out"
names=$(grep -oE 'ringfire_[a-z_]+' "$rules" | sort -u)
[[ $(wc -l <<<"$names") -ge 15 ]] || fail "the rules name only $(wc -l <<<"$names") series: $names"
for n in $names; do
  grep -q "\"$n\"" "$root/cli/metrics_server.cc" || fail "$n is in the rules and not exported (cli/metrics_server.cc)"
done
# Every alert has its runbook row in deploy/OPERATIONS.md.
for a in $(grep -oE 'alert: Ringfire[A-Za-z]+' "$rules" | cut -d' ' -f2); do
  grep -q "^| \`$a\`" "$root/deploy/OPERATIONS.md" || fail "$a has no row in deploy/OPERATIONS.md's Alerts"
done
if (( fails )); then echo "alerts_test: $fails failed"; exit 1; fi
echo "alerts_test: all passed ($(wc -l <<<"$names") series, $(grep -c 'alert: ' "$rules") alerts)"
