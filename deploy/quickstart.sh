#!/usr/bin/env bash
# `make run`: the daemon's main job, end to end, on this machine: the daemon with 4 slots on its
# embedded Redis (redis.url = "embedded": a private redis-server it starts and stops itself), the
# bundled sample documents parsed to Markdown, then `tender-pool status`. Everything lives under
# var/quickstart/ and is stopped at the end (nothing is left running).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=$REPO/.venv/bin
STATE=${TENDER_POOL_QUICKSTART_DIR:-$REPO/var/quickstart}
rm -rf "$STATE"
mkdir -p "$STATE/samples" "$STATE/results"

# Sample documents: the repo's two legacy files, plus .docx/.xlsx/.csv made here.
cp jvm/training/notice.doc jvm/training/signin.xls "$STATE/samples/"
"$BIN/python" - "$STATE/samples" <<'PY'
import sys, csv, pathlib, zipfile
import openpyxl
d = pathlib.Path(sys.argv[1])
wb = openpyxl.Workbook(); ws = wb.active; ws.title = "报价表"
ws.append(["序号", "货物名称", "数量", "单价（元）", "合计（元）"])
for i, (name, n, p) in enumerate([("服务器", 4, 56000), ("交换机", 8, 9800), ("不间断电源", 2, 23000)], 1):
    ws.append([i, name, n, p, n * p])
ws.merge_cells("A6:D6"); ws["A6"] = "总计"; ws["E6"] = sum(n * p for _, n, p in [("", 4, 56000), ("", 8, 9800), ("", 2, 23000)])
wb.save(d / "quote.xlsx")
with open(d / "bidders.csv", "w", newline="", encoding="utf-8") as f:
    csv.writer(f).writerows([["投标人", "报价（万元）", "得分"], ["甲公司", "312.5", "91.5"], ["乙公司", "298.0", "88.0"]])
PY

cat > "$STATE/tender-pool.toml" <<TOML
[redis]
url = "embedded"
[pool]
worker_count = 4
host_id = "quickstart"
heartbeat = 2
input_roots = ["$STATE/samples"]
results_dir = "$STATE/results"
state_dir = "$STATE"
drain_timeout = 10
[status]
socket = "$STATE/status.sock"
[metrics]
listen = ""
TOML
export TENDER_POOL_CONFIG=$STATE/tender-pool.toml

cleanup() {  # SIGTERM: the daemon drains, then stops its embedded Redis
  [ -n "${DAEMON:-}" ] && kill -TERM "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
}
trap cleanup EXIT

"$BIN/tender-pool" run > "$STATE/daemon.log" 2>&1 &
DAEMON=$!
for _ in $(seq 150); do "$BIN/tender-pool" status >/dev/null 2>&1 && break; sleep 0.1; done

echo "== submitting $(ls "$STATE/samples" | wc -l) sample documents"
ids=()
for f in "$STATE"/samples/*; do
  ids+=("$("$BIN/tender-pool" submit "$f" --user "demo-$(basename "$f" | tr . -)" --kind parse_markdown)")
done
rc=0
for id in "${ids[@]}"; do
  "$BIN/python" - "$id" <<'PY' || rc=1
import json, subprocess, sys, time
jid = sys.argv[1]
for _ in range(600):
    j = json.loads(subprocess.run([sys.executable.replace("python", "tender-pool"), "job", jid, "--json"],
                                  capture_output=True, text=True, check=True).stdout)
    if j["state"] in ("completed", "failed", "cancelled", "dead", "skipped"):
        break
    time.sleep(0.1)
name = j["payload"]["file"].rsplit("/", 1)[1]
if j["state"] == "completed":
    r = j["result"]
    print(f"  {name:<14} {j['state']:<9} {r['format']:<5} {r['pages']:>3} page(s)  {r['markdown_path']}")
else:
    print(f"  {name:<14} {j['state']:<9} {j['error']}")
    sys.exit(1)
PY
done
echo
echo "== tender-pool status"
"$BIN/tender-pool" status || true
echo
echo "Markdown and metadata are in $STATE/results/<job id>/; the daemon's log is $STATE/daemon.log."
echo
echo "== the admin web on these files: this starts the daemon again and the dashboard on http://127.0.0.1:9465/"
echo "   (this machine's users only; ^C stops the dashboard, then 'kill %1' the daemon)"
echo "export TENDER_POOL_CONFIG=$STATE/tender-pool.toml; $BIN/tender-pool run >>$STATE/daemon.log 2>&1 & $BIN/tender-pool web"
exit $rc
