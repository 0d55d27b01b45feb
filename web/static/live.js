// Live charts on the overview page, one set per deployment: seeded from the page's
// history (the last 15 minutes), then one point a second from the "stats" message that
// htmx-ext-sse swaps into #live-stats (its #live-points holds each deployment's point).
(function () {
  "use strict";
  const MAX_POINTS = 900;
  // A version's line per role (stable, canary, shadow): null where no version plays it.
  const ROLES = [["stable", "#2563eb", undefined], ["canary", "#db2777", [6, 3]], ["shadow", "#6b7280", [2, 3]]];
  const role = (p, r, field) => (p.versions && p.versions[r] ? p.versions[r][field] : null);
  const byRole = (label, field) => ROLES.map(([r, stroke, dash]) => [`${r} ${label}`, (p) => role(p, r, field), stroke, dash]);
  // Refusals at admission, by reason, drawn with the queue: an overload that admission
  // refuses instead of queueing shows here, not as a queue.
  const SHED = [["queue_full", "refused/s: queue full", "#b91c1c"],
                ["slo_ttft", "refused/s: TTFT SLO", "#ea580c"],
                ["slo_tokens_per_s", "refused/s: tokens/s SLO", "#a16207"],
                ["slo_burn", "refused/s: budget burn", "#9333ea"]];
  const shed = (p, reason) => (p.shed_per_s ? p.shed_per_s[reason] || 0 : null);
  const LINES = {
    queue: [["interactive waiting", (p) => p.num_waiting_interactive, "#dc2626"],
            ["batch waiting", (p) => p.num_waiting_batch, "#f59e0b"],
            ...SHED.map(([reason, label, stroke]) => [label, (p) => shed(p, reason), stroke, [4, 3]])],
    running: [["running sequences", (p) => p.num_running, "#16a34a"], ...byRole("running", "num_running")],
    kv: [["KV cache used %", (p) => p.kv_cache_usage * 100, "#7c3aed"]],
    ttft: [["TTFT p50 (s)", (p) => p.ttft_p50_s, "#16a34a"],
           ["SLO target (s)", (p) => p.ttft_target_s, "#111827", [8, 4]],
           ...byRole("TTFT p99 (s)", "ttft_p99_s")],
    forecast: [["actual / forecast p50", (p) => p.forecast_p50, "#2563eb"],
               ["actual / forecast p90", (p) => p.forecast_p90, "#dc2626"],
               ["as forecast", () => 1, "#6b7280", [6, 4]]],
    tokens: [["output tokens/s", (p) => p.output_tokens_per_s, "#16a34a"], ...byRole("tokens/s", "output_tokens_per_s")],
    // Stable's served line first and the canary's sixth, where readers of
    // window.vigilLive (the browser tests) find them.
    requests: ((served) => [served[0],
               ["shed/s", (p) => p.requests_per_s.shed, "#f59e0b"],
               ["timed out/s", (p) => p.requests_per_s.timed_out, "#7c3aed"],
               ["failed/s", (p) => p.requests_per_s.failed, "#dc2626"],
               ["to fallback/s", (p) => p.fallbacks_per_s, "#0891b2", [4, 4]],
               served[1], served[2]])(byRole("served/s", "served_per_s")),
  };
  const live = (window.vigilLive = {}); // deployment -> {data: {chart: columns}, charts}

  function value(v) { return v === null || v === undefined ? null : v; }

  function push(name, p) {
    const d = live[name];
    if (!d) return;
    for (const [chart, lines] of Object.entries(LINES)) {
      const cols = d.data[chart];
      cols[0].push(p.wall_ts);
      lines.forEach(([, get], i) => cols[i + 1].push(value(get(p))));
      if (cols[0].length > MAX_POINTS) cols.forEach((c) => c.shift());
    }
  }

  function build() {
    if (typeof uPlot === "undefined") return;
    const historyEl = document.getElementById("live-history");
    if (!historyEl) return;
    const history = JSON.parse(historyEl.textContent || "{}");
    document.querySelectorAll(".deployment-live").forEach((section) => {
      const name = section.dataset.deployment;
      const d = (live[name] = { data: {}, charts: {} });
      for (const [chart, lines] of Object.entries(LINES)) d.data[chart] = [[], ...lines.map(() => [])];
      (history[name] || []).forEach((p) => push(name, p));
      section.querySelectorAll("[data-chart]").forEach((el) => {
        const chart = el.dataset.chart;
        d.charts[chart] = new uPlot({
          width: Math.max(300, el.clientWidth), height: 160,
          // From 0, and at least to 1, so that an idle line lies on the floor.
          scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max || 0)] } },
          legend: { live: false },
          series: [{}, ...LINES[chart].map(([label, , stroke, dash]) => ({ label, stroke, width: 2, dash, spanGaps: true }))],
        }, d.data[chart], el);
      });
    });
  }

  document.addEventListener("DOMContentLoaded", build);
  document.addEventListener("htmx:sseMessage", function (evt) {
    if (evt.detail.type !== "stats") return;
    const el = document.getElementById("live-points");
    if (!el) return;
    const points = JSON.parse(el.textContent || "{}");
    for (const [name, p] of Object.entries(points)) {
      if (!live[name] || !p) continue;
      push(name, p);
      for (const [chart, u] of Object.entries(live[name].charts)) u.setData(live[name].data[chart]);
    }
  });
})();
