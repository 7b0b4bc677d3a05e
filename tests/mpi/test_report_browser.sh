#!/usr/bin/env bash
# test_report_browser.sh SIM ZEPHON - the cluster report's HTML page in a
# real browser (Debian's headless Chromium): for simulated reports of 16,
# 1,000 and 10,000 ranks (SIM --write DIR N: one straggler, 40 windows)
# and for the report of a real `zephon run` (a singleton, with windows),
# the page loads with no console error, fits a few screens (its height at
# 1280 px width is at most MAX_HEIGHT px, whatever the rank count), and
# every chart is drawn: each <svg class="chart"> has a non-zero size and
# holds drawn rectangles, and a simulated page has its 7 charts (the time
# bars, the heat map, 5 distributions over ranks).
# A copy of the page gets a small script at its end that measures the
# page after the load event and leaves a marker in the DOM, read back
# with --dump-dom (the report itself has no script).
# With ZP_REPORT_SCREENSHOTS=DIR it also writes a screenshot of each
# simulated page, 1280 px wide and the page's height, as DIR/report-N.png
# (docs/report.md shows them).
# Exit 77 (ctest: skipped) with a message when chromium is not installed
# (tools/deps.sh installs it; this happens only where it could not be).
set -u
SIM=${1:?usage: test_report_browser.sh SIM ZEPHON}
Z=${2:?usage: test_report_browser.sh SIM ZEPHON}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROMIUM ]]; then
  echo "SKIP: chromium is not installed (tools/deps.sh installs Debian's chromium; here it could" \
       "not be installed): the HTML report was NOT checked in a browser"
  exit 77
fi
MAX_HEIGHT=5000
SHOTS=${ZP_REPORT_SCREENSHOTS:-}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; passes=0
ok()  { passes=$((passes+1)); echo "ok - $*"; }
bad() { fails=$((fails+1)); echo "FAIL - $*"; }

for n in 16 1000 10000; do
  "$SIM" --write "$T/sim$n" $n || { echo "FAIL - cannot write the simulated $n-rank report"; exit 1; }
done
"$Z" gen --out "$T/data" --shards 4 --samples-per-shard 200 --seed 1 >/dev/null || { echo "FAIL - gen"; exit 1; }
timeout 60 "$Z" run "$T/data/manifest.json" --quiet --threads 1 --microbatch 4 --report-every 10 \
  --report "$T/run" > "$T/run.out" 2>&1 || { cat "$T/run.out"; echo "FAIL - zephon run --report"; exit 1; }

check_page() { # NAME DIR MIN_CHARTS [SHOT]
  local name=$1 dir=$2 min_charts=$3 shot=${4:-} page="$2/check.html"
  # the page, with the checking script before </body>
  python3 - "$dir/report.html" "$page" "$min_charts" <<'PY'
import sys
html = open(sys.argv[1], encoding="utf-8").read()
script = """<script>
window.addEventListener('load', function () {
  var charts = document.querySelectorAll('svg.chart'), bad = [];
  charts.forEach(function (s, i) {
    var b = s.getBoundingClientRect();
    if (!(b.width > 0 && b.height > 0)) bad.push('chart ' + i + ' has no size');
    var drawn = 0;
    s.querySelectorAll('rect').forEach(function (r) {
      var q = r.getBBox();
      if (q.width > 0 && q.height > 0) drawn++;
    });
    if (!drawn) bad.push('chart ' + i + ' draws no rectangle');
    else bad.length || (document.title += ' ' + drawn);
  });
  if (charts.length < MIN_CHARTS) bad.push('only ' + charts.length + ' charts');
  var h = document.documentElement.scrollHeight;
  var m = document.createElement('div');
  m.id = 'zp-check';
  m.textContent = 'HEIGHT ' + h + ' ' +
    (bad.length ? 'CHARTS-BAD: ' + bad.join('; ') : 'CHARTS-OK ' + charts.length);
  document.body.appendChild(m);
});
</script>
"""
script = script.replace("MIN_CHARTS", sys.argv[3])
assert html.count("</body>") == 1
open(sys.argv[2], "w", encoding="utf-8").write(html.replace("</body>", script + "</body>"))
PY
  local prof; prof=$(mktemp -d -p "$T")
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$prof" --enable-logging=stderr --v=0 --virtual-time-budget=10000 \
    --window-size=1280,1000 --dump-dom "file://$page" > "$dir/dom.html" 2> "$dir/chromium.log"
  local rc=$?
  if [[ $rc -ne 0 ]]; then bad "$name: chromium exited with $rc"; tail -20 "$dir/chromium.log"; return; fi
  local marker; marker=$(grep -o '<div id="zp-check">[^<]*' "$dir/dom.html" | head -1)
  marker=${marker#*>}
  local height=${marker#HEIGHT }; height=${height%% *}; marker=${marker#HEIGHT * }
  if [[ $marker == CHARTS-OK* ]]; then ok "$name: charts drawn ($marker)"; else
    bad "$name: charts not drawn (${marker:-no marker: the page did not load or its script did not run})"; fi
  if [[ $height =~ ^[0-9]+$ ]] && (( height <= MAX_HEIGHT )); then
    ok "$name: page height $height px at 1280 px width (<= $MAX_HEIGHT)"
  else bad "$name: page height ${height:-unknown} px at 1280 px width (> $MAX_HEIGHT)"; fi
  if [[ -n $shot && $height =~ ^[0-9]+$ ]]; then
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
      --disable-background-networking --disable-component-update --disable-sync \
      --user-data-dir="$prof" --window-size=1280,"$height" --screenshot="$shot" \
      "file://$dir/report.html" > /dev/null 2>&1 && echo "screenshot: $shot" || bad "$name: screenshot"
  fi
  # console errors (a script error, a resource that does not load)
  if grep -E "CONSOLE|Uncaught|Failed to load|net::ERR" "$dir/chromium.log" | grep -qv "zp-check"; then
    bad "$name: console errors"; grep -E "CONSOLE|Uncaught|Failed to load|net::ERR" "$dir/chromium.log" | head
  else ok "$name: no console error"; fi
}

for n in 16 1000 10000; do
  check_page "simulated $n-rank report" "$T/sim$n" 7 ${SHOTS:+"$SHOTS/report-$n.png"}
done
check_page "zephon run report" "$T/run" 2
echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
